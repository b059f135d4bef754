"""create_graph=True through a compiled call with random draws (create_graph.py): the
backward's recompute of the forward reads the draws the forward made (a dropout mask, a
noise sample, multinomial's indices), so second and third derivatives are PyTorch's for the
draws the outputs show. The draws come back beside the outputs (detached) and PyTorch runs
with them as constants."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")
pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

R = np.random.default_rng(0)
W1 = R.standard_normal((16, 5)).astype(np.float32) * 0.5
W2 = R.standard_normal((1, 16)).astype(np.float32) * 0.5
X = R.standard_normal((6, 5)).astype(np.float32)
P = np.abs(R.standard_normal((6, 5))).astype(np.float32) + 0.1


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def _penalty(lib, x, w1, w2, y):
    """WGAN-GP's gradient penalty: (gradient of y's sum by x, its weights' gradients)."""
    (gx,) = lib.autograd.grad(y.sum(), x, create_graph=True)
    ((gx.norm(2, dim=1) - 1) ** 2).mean().backward()
    return [gx.detach().numpy(), w1.grad.numpy(), w2.grad.numpy()]


def _leaves(lib, k):
    return (lib.tensor(X * (1 + k), requires_grad=True), lib.tensor(W1, requires_grad=True),
            lib.tensor(W2, requires_grad=True))


def test_dropout_mlp_gradient_penalty_uses_the_forwards_mask():
    def f(x, w1, w2):
        h = tj.nn.functional.dropout(tj.tanh(x @ w1.t()), 0.5)
        return (h @ w2.t()).sum(1), h
    fn = tj.compile(f)
    masks = []
    for k in range(3):
        x, w1, w2 = _leaves(tj, k)
        y, h = fn(x, w1, w2)
        got = _penalty(tj, x, w1, w2, y)
        keep = torch.tensor(h.detach().numpy() != 0) * 2.0
        xt, w1t, w2t = _leaves(torch, k)
        want = _penalty(torch, xt, w1t, w2t, ((torch.tanh(xt @ w1t.t()) * keep) @ w2t.t()).sum(1))
        for a, b in zip(got, want):
            _close(a, b)
        masks.append(keep.numpy())
    assert not np.array_equal(masks[0], masks[1])   # (each call draws a new mask)
    assert type(x.grad_fn).__name__ != "CompiledNode" and fn.cache_stats()["compiles"] == 1


# (the draw as tracejit makes it from u = tanh(x * w), how it enters h; PyTorch gets it as a constant)
CASES = {
    "dropout": (lambda u: (tj.nn.functional.dropout(u, 0.5) != 0) * 2.0, "mul"),
    "rand_like": (lambda u: tj.rand_like(u), "mul"),
    "randn_like": (lambda u: tj.randn_like(u), "add"),
    "bernoulli": (lambda u: tj.bernoulli(tj.tensor(P) / 3), "mul"),
    "multinomial": (lambda u: tj.multinomial(tj.tensor(P[0]), 7, replacement=True), "index"),
}
COMBINE = {"mul": lambda u, d: u * d, "add": lambda u, d: u + d, "index": lambda u, d: u[:, d]}


def _orders(lib, x, w, loss, v):
    """First, second and third derivatives of `loss` (a Hessian-vector product's square by
    w for the third)."""
    (gx,) = lib.autograd.grad(loss, x, create_graph=True)
    (hv,) = lib.autograd.grad((gx * lib.tensor(v)).sum(), x, create_graph=True)
    (third,) = lib.autograd.grad(hv.pow(2).sum(), w)
    return [t.detach().numpy() for t in (gx, hv, third)]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_loss_of_a_draw_differentiated_thrice_reads_the_forwards_draw(kind):
    # a 0-d loss (its forward computes the gradients), the draw a second, detached output
    draw, how = CASES[kind]

    def f(x, w):
        u = tj.tanh(x * w)
        d = draw(u)
        return (COMBINE[how](u, d) ** 2).sum(), d.detach()
    fn = tj.compile(f)
    v = R.standard_normal((6, 5)).astype(np.float32)
    for k in range(2):
        x, w = tj.tensor(X * (1 + k), requires_grad=True), tj.tensor(P, requires_grad=True)
        loss, d = fn(x, w)
        got = [loss.item()] + _orders(tj, x, w, loss, v)
        xt, wt = torch.tensor(X * (1 + k), requires_grad=True), torch.tensor(P, requires_grad=True)
        ht = COMBINE[how](torch.tanh(xt * wt), torch.tensor(d.numpy()))
        want = [(ht ** 2).sum().item()] + _orders(torch, xt, wt, (ht ** 2).sum(), v)
        for a, b in zip(got, want):
            _close(a, b)


def test_checkpointed_dropout_in_and_around_a_compiled_call_replays_its_mask():
    # inside: the checkpointed block is part of the captured graph (its draws made once);
    # around, reentrant: the backward runs the compiled call again at the forward's RNG state
    def block(t):
        return tj.nn.functional.dropout(tj.tanh(t * 3), 0.5)

    inside = tj.compile(lambda t: tj.utils.checkpoint.checkpoint(block, t, use_reentrant=False) * 2)
    around = tj.compile(block)
    for k, run in enumerate((inside, lambda t: tj.utils.checkpoint.checkpoint(around, t, use_reentrant=True) * 2)):
        x = tj.tensor(X[0] * (1 + k), requires_grad=True)
        y = run(x)
        (gx,) = tj.autograd.grad(y.pow(2).sum(), x, create_graph=k == 0)
        if k == 0:
            (gg,) = tj.autograd.grad(gx.sum(), x)
        keep = torch.tensor(y.detach().numpy() != 0) * 2.0
        xt = torch.tensor(X[0] * (1 + k), requires_grad=True)
        yt = torch.tanh(xt * 3) * keep * 2
        (gxt,) = torch.autograd.grad(yt.pow(2).sum(), xt, create_graph=True)
        _close(gx.detach().numpy(), gxt.detach().numpy())
        if k == 0:
            _close(gg.numpy(), torch.autograd.grad(gxt.sum(), xt)[0].numpy())


def test_a_draw_in_a_branch_body_is_refused_for_create_graph():
    @tj.script
    def f(x):
        if x.sum() > 0:
            y = x * tj.rand_like(x)
        else:
            y = x * 2
        return (tj.tanh(y) ** 2).sum()
    x = tj.tensor(np.abs(X[0]), requires_grad=True)
    loss = f(x)
    with pytest.raises(NotImplementedError, match="random draw inside a loop or branch body"):
        tj.autograd.grad(loss, x, create_graph=True)
    (g,) = tj.autograd.grad(f(x), x)   # (a first order is the forward's own)
    assert g.shape == x.shape
