"""Autograd edge cases against PyTorch: ops at their non-differentiable points (abs, relu,
max and clamp ties and bounds, sqrt and norms at 0, where with NaN in the unselected branch,
selections with ties, infinities in softmax and logsumexp), first derivatives and, through
``autograd.grad(create_graph=True)``, second derivatives (the gradient of a weighted sum of
the first), eager and captured (``tj.trace``, the IR interpreter); and seeded random
programs with tensor hooks, ``retain_graph`` backward twice and a gradient penalty.
Tolerances: float64 1e-9."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

nan, inf = float("nan"), float("inf")
Z = [0.0, -1.0, 1.0, 2.0, -0.0]


def _F(lib):
    return lib.nn.functional


# name -> (fn(lib, x), values at the kinks, compare second derivatives)
CASES = {
    "abs": (lambda l, x: x.abs(), Z, True),
    "relu": (lambda l, x: l.relu(x), Z, True),
    "max_zero": (lambda l, x: l.maximum(x, l.zeros_like(x)), Z, True),
    "max_tie": (lambda l, x: l.maximum(x, x.flip(0)), [1.0, 2.0, 1.0], True),
    "amax_tie": (lambda l, x: x.amax(), [1.0, 3.0, 3.0], True),
    "max_all_tie": (lambda l, x: x.max(), [1.0, 3.0, 3.0], True),
    "amin_dim_tie": (lambda l, x: x.reshape(2, 2).amin(1), [1.0, 1.0, 2.0, 0.0], True),
    "clamp_bounds": (lambda l, x: x.clamp(-1, 1), [-1.0, 1.0, 0.5, 2.0, -2.0], True),
    "clamp_tensor_bounds": (lambda l, x: x.clamp(l.tensor([-1.0, 0, 1], dtype=x.dtype),
                                                 l.tensor([1.0, 0, 2], dtype=x.dtype)), [-1.0, 0.0, 1.0], True),
    "hardtanh": (lambda l, x: _F(l).hardtanh(x), [-1.0, 1.0, 0.0, 3.0], True),
    "relu6": (lambda l, x: _F(l).relu6(x), [0.0, 6.0, 3.0, 7.0], True),
    "leaky_relu": (lambda l, x: _F(l).leaky_relu(x, 0.1), [0.0, 1.0, -1.0], True),
    # (PyTorch's second derivative of elu at 0 takes the other side than its first)
    "elu": (lambda l, x: _F(l).elu(x, 2.0), [0.0, 1.0, -1.0], False),
    "selu": (lambda l, x: _F(l).selu(x), [0.0, 1.0, -1.0], False),
    "sqrt": (lambda l, x: x.sqrt(), [0.0, 1.0], True),
    "pow_half": (lambda l, x: x ** 0.5, [0.0, 4.0], True),
    "pow2": (lambda l, x: x ** 2, [0.0, -1.0], True),
    "pow0": (lambda l, x: x ** 0, [0.0, 2.0], True),
    "norm_zeros": (lambda l, x: x.norm(), [0.0, 0.0], False),   # (PyTorch's second derivative: NaN)
    "norm1": (lambda l, x: x.norm(1), [0.0, 1.0], True),
    "norm_inf_tie": (lambda l, x: x.norm(inf), [1.0, -2.0, 2.0], True),
    "cosine_zero": (lambda l, x: _F(l).cosine_similarity(x.reshape(1, -1), l.ones(1, 2, dtype=x.dtype)),
                    [0.0, 0.0], False),
    "where_nan_branch": (lambda l, x: l.where(x > 0, x.log(), l.zeros_like(x)), [0.0, -1.0, 2.0], True),
    "where_sqrt_branch": (lambda l, x: l.where(x > 0, x.sqrt(), x), [0.0, -1.0, 4.0], True),
    "sign_times": (lambda l, x: x.sign() * x, [0.0, 1.0], True),
    "round": (lambda l, x: x.round() + x, [0.5, 1.5], True),
    "std_one": (lambda l, x: x.std(), [1.0], True),
    "std_equal": (lambda l, x: x.std(), [2.0, 2.0], True),
    "log_zero": (lambda l, x: x.log(), [0.0, 1.0], True),
    "atan2_origin": (lambda l, x: l.atan2(x, x * 2), [0.0, 1.0], False),
    "logit_bounds": (lambda l, x: l.logit(x), [0.0, 1.0, 0.5], False),
    "prod_one_zero": (lambda l, x: x.prod(), [0.0, 2.0, 3.0], True),
    "cumprod_nonzero": (lambda l, x: x.cumprod(0), [2.0, -1.0, 3.0], True),
    "logsumexp_neg_inf": (lambda l, x: x.logsumexp(0), [-inf, -inf], True),
    "softmax_neg_inf": (lambda l, x: x.softmax(0), [-inf, 1.0], True),
    "log_softmax_neg_inf": (lambda l, x: x.log_softmax(0)[1:], [-inf, 1.0], True),
    "sigmoid_far": (lambda l, x: x.sigmoid(), [100.0, -100.0], True),
    "softplus_far": (lambda l, x: _F(l).softplus(x), [100.0, -100.0], True),
    "logsigmoid_far": (lambda l, x: _F(l).logsigmoid(x), [-100.0, 100.0], True),
    "logsigmoid_zero": (lambda l, x: _F(l).logsigmoid(x), [0.0, -0.0, 1.0], True),
    "bce_logits_zero": (lambda l, x: _F(l).binary_cross_entropy_with_logits(x, l.full_like(x, 0.3)), [0.0, 2.0], True),
    "sort": (lambda l, x: x.sort()[0] * l.arange(3, dtype=x.dtype), [3.0, 1.0, 2.0], True),
    "topk": (lambda l, x: x.topk(2)[0], [3.0, 1.0, 2.0], True),
    "huber_kinks": (lambda l, x: _F(l).huber_loss(x, l.zeros_like(x), delta=1.0), [1.0, -1.0, 0.0, 0.5], True),
    "smooth_l1_kinks": (lambda l, x: _F(l).smooth_l1_loss(x, l.zeros_like(x), beta=1.0), [1.0, -1.0, 0.0], True),
    "l1_zero": (lambda l, x: _F(l).l1_loss(x, l.zeros_like(x)), [0.0, 1.0], True),
    "fmod": (lambda l, x: l.fmod(x, 1.0), [1.0, 2.5], True),
    "remainder": (lambda l, x: l.remainder(x, 1.0), [1.0, -2.5], True),
    "exp_inf": (lambda l, x: x.exp(), [inf, 0.0], True),
    "tanh_inf": (lambda l, x: x.tanh(), [inf, -inf], True),
    "hypot_origin": (lambda l, x: l.hypot(x, x), [0.0, 1.0], True),
    "fmax_nan_tie": (lambda l, x: l.fmax(x, l.ones_like(x)), [nan, 2.0, 1.0], True),
    "amax_nan": (lambda l, x: x.amax(), [nan, 2.0], True),
    "gelu_zero": (lambda l, x: _F(l).gelu(x), [0.0], True),
    "empty_sum": (lambda l, x: x[:0].sum() + x.sum(), [1.0], True),
}


def _derivatives(lib, fn, vals, second):
    x = lib.tensor(np.array(vals), requires_grad=True)
    y = fn(lib, x)
    (gx,) = lib.autograd.grad(y.sum(), x, create_graph=second)
    out = [y.detach().numpy(), gx.detach().numpy()]
    if second:   # (a piecewise-linear op's gradient may have no graph: its derivative is 0)
        w = lib.arange(gx.numel(), dtype=gx.dtype) + 1
        ggx = lib.autograd.grad((gx * w).sum(), x, allow_unused=True)[0] if gx.requires_grad else None
        zero = ggx is None or getattr(ggx, "_is_zerotensor", lambda: False)()
        out.append(np.zeros_like(out[1]) if zero else ggx.numpy())
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivatives_at_kinks_match_torch(name):
    fn, vals, second = CASES[name]
    second = second and _derivatives(torch, fn, vals, False)[1].size > 0
    want = _derivatives(torch, fn, vals, second)
    for captured in (False, True):
        f = (lambda l, x: tj.trace(lambda t: fn(l, t), compiler="interpret")(x)) if captured else fn
        got = _derivatives(tj, f, vals, second)
        for k, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, equal_nan=True,
                                       err_msg=f"{name} captured={captured} derivative {k}")


def _hooked(lib, x, w, k):
    seen = []
    h = x @ w
    if k % 2:
        h.register_hook(lambda g: g * 2)
    a = h.tanh() if k % 3 == 0 else h.relu() if k % 3 == 1 else h.sigmoid()
    if k % 4 == 1:
        a.register_hook(lambda g: seen.append(g.detach().numpy().copy()))
    if k % 5 == 0:
        x.register_hook(lambda g: g + 1)
    b = (a * a).sum(1).softmax(0) if k % 2 else a.mean(0).log_softmax(0)
    loss = (b * lib.arange(b.numel(), dtype=b.dtype)).sum()
    loss.backward(retain_graph=True)
    first = [x.grad.clone(), w.grad.clone()]
    loss.backward(retain_graph=True)     # (accumulates a second time)
    gx, gw = lib.autograd.grad((a ** 3).sum(), [x, w], create_graph=True)
    penalty = (gx ** 2).sum() + (gw ** 2).sum()
    (gp,) = lib.autograd.grad(penalty, [w])
    return [t.detach().numpy() for t in first + [x.grad, w.grad, gp]] + seen


@pytest.mark.parametrize("k", range(12))
def test_hooks_retain_graph_and_gradient_penalty_match_torch(k):
    r = np.random.default_rng(k)
    xs, ws = r.standard_normal((3, 4)), r.standard_normal((4, 5))
    res = [_hooked(lib, lib.tensor(xs, requires_grad=True), lib.tensor(ws, requires_grad=True), k)
           for lib in (torch, tj)]
    assert len(res[0]) == len(res[1])
    for i, (g, w) in enumerate(zip(res[1], res[0])):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=f"k={k} item {i}")


def test_retain_grad_inside_a_compiled_function_keeps_the_gradient_as_torch():
    seen = {}

    def f(lib, x):
        h = x * x
        h.retain_grad()
        seen[lib] = h
        return (h.tanh() * 2).sum()
    xs = np.array([0.5, -1.0, 2.0])
    for lib, fn in ((torch, lambda x: f(torch, x)), (tj, tj.compile(lambda x: f(tj, x)))):
        fn(lib.tensor(xs, requires_grad=True)).backward()
    np.testing.assert_allclose(seen[tj].grad.numpy(), seen[torch].grad.numpy(), rtol=1e-12)
