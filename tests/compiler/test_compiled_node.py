"""A compiled call's autograd node (compiler/compiled_node.py): before the call's own in-place
update of an input, `keep_input` keeps the value the forward read where the backward reads
it, and keeps no copy of an input the backward never reads; a hook on an output the call
also reads sees its whole gradient; gradients as PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _step(w, s, r):
    loss = (w * s).sum() + (w * w).sum()
    s.mul_(2)           # read by the backward: d loss / d w = s as the forward saw it
    r.add_(1)           # read by nothing the backward does
    return loss


def test_only_inputs_the_backward_reads_are_kept():
    rng = np.random.default_rng(0)
    wv, sv, rv = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    # (PyTorch's eager backward refuses the write into s; torch.compile's keeps its value)
    tw = torch.tensor(wv, requires_grad=True)
    ((tw * torch.tensor(sv)).sum() + (tw * tw).sum()).backward()
    cf = tj.compile(_step)
    w, s, r = tj.tensor(wv, requires_grad=True), tj.tensor(sv), tj.tensor(rv)
    loss = cf(w, s, r)
    node = loss.grad_fn
    assert any(x is r for x in node.inputs) and not any(x is s for x in node.inputs)
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), sv * 2)
    np.testing.assert_allclose(r.numpy(), rv + 1)


def _rnn_step(L):
    def step(h, w):
        nh = L.tanh(h @ w)
        return (nh * 2).sum(1), nh     # the value head reads the state it also returns
    return step


def test_a_hook_on_an_output_the_call_also_reads_sees_its_whole_gradient():
    # (torch.compile's hook sees only the gradient from outside the call: 9.18 here, eager 5.51)
    w0 = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32) * 0.5

    def run(L, f, steps, scale):
        w = L.tensor(w0, requires_grad=True)
        h, total = L.ones(4, 6), 0
        for _ in range(steps):
            v, h = f(h, w)
            handle = h.register_hook(lambda g: g * scale)
            total = total + v.sum() + h.sum()
        if scale == 1:
            handle.remove()
        total.backward()
        return w.grad.numpy()
    cf = tj.trace(_rnn_step(tj), compile="sync")
    for steps, scale in ((1, 0.5), (2, 0.5), (2, 1)):
        np.testing.assert_allclose(run(tj, cf, steps, scale), run(torch, _rnn_step(torch), steps, scale),
                                   rtol=1e-5, atol=1e-5)


def test_the_recomputed_call_replays_the_forwards_random_draws():
    def step(h, w):
        nh = tj.nn.functional.dropout(tj.tanh(h @ w), 0.5, training=True)
        return (nh * 2).sum(1), nh
    cf = tj.trace(step, compile="sync")
    w0 = np.random.default_rng(1).standard_normal((6, 6)).astype(np.float32)
    got = []
    for hook in (False, True):
        tj.manual_seed(3)
        w = tj.tensor(w0, requires_grad=True)
        v, h = cf(tj.ones(4, 6), w)
        if hook:
            h.register_hook(lambda g: g)      # (the same gradient, by the interpreted graph)
        (v.sum() + h.sum()).backward()
        got.append(w.grad.numpy())
    np.testing.assert_allclose(got[1], got[0], rtol=1e-5, atol=1e-6)


def test_retain_grad_of_an_output_the_call_also_reads_keeps_its_whole_gradient():
    w0 = np.random.default_rng(2).standard_normal((6, 6)).astype(np.float32) * 0.5

    def run(L, f):
        w = L.tensor(w0, requires_grad=True)
        v, h = f(L.ones(4, 6), w)
        h.retain_grad()
        h.register_hook(lambda g: g * 0.5)    # (the retained gradient is the hooked one)
        (v.sum() + (h * h).sum()).backward()
        return h.retains_grad, h.grad.numpy(), w.grad.numpy()
    got, want = run(tj, tj.trace(_rnn_step(tj), compile="sync")), run(torch, _rnn_step(torch))
    assert got[0] and want[0]
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_a_create_graph_backward_recomputes_from_the_buffers_the_forward_read(act):
    """A spectral norm's power iteration overwrites its vector u during the call and only
    the sigma made from it (no gradient through u) reaches the weight: the create_graph
    backward recomputes sigma from the call's inputs, so it must read the u the forward
    read, not the updated one (an R1 penalty of an SN discriminator, as PyTorch's)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 6)).astype(np.float32)

    def make(lib):
        lib.manual_seed(0)
        nn = lib.nn
        return nn.Sequential(nn.utils.spectral_norm(nn.Linear(6, 16)), getattr(nn, {"relu": "ReLU", "tanh": "Tanh"}[act])(),
                             nn.Linear(16, 1))

    def run(lib, d, f):
        xs = lib.tensor(x, requires_grad=True)
        (g,) = lib.autograd.grad(f(xs).sum(), xs, create_graph=True)
        g.pow(2).sum(1).mean().backward()
        grads = [p.grad.numpy() for _, p in d.named_parameters() if p.grad is not None]
        return [g.detach().numpy(), d[0].weight_u.numpy()] + grads

    ref = make(torch)
    mine = make(tj)
    mine.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    want = run(torch, ref, ref)
    got = run(tj, mine, tj.compile(mine))
    assert len(got) == len(want) == 5
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
