"""Differential fuzzing of in-place writes through views under autograd against PyTorch:
a view (view, transpose, diagonal, unbind, split, narrow, select, strided slices, unfold,
movedim, ...) of an intermediate written by an in-place op, then the base and the view
used and differentiated, eagerly and through ``tj.compile``. Where PyTorch refuses (a
saved tensor modified, a multi-output view written) eager must give the values of the
functionalized program (``torch.func.functionalize``), which is also what compiled gives."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")
functionalize = pytest.importorskip("torch.func").functionalize

VIEWS = {
    "view": lambda y: y.view(4, 4), "transpose": lambda y: y.transpose(0, 1), "diagonal": lambda y: y.diagonal(1),
    "unbind": lambda y: y.unbind(1)[2], "split": lambda y: y.split(2, 0)[1], "narrow": lambda y: y.narrow(1, 1, 2),
    "select": lambda y: y.select(1, -1), "slice": lambda y: y[1:, ::2], "unsqueeze": lambda y: y.unsqueeze(1),
    "reshape": lambda y: y.reshape(-1), "unflatten": lambda y: y.unflatten(1, (2, 2)), "movedim": lambda y: y.movedim(0, 1),
    "window": lambda y: y.view(-1)[2:10].view(2, 4), "unfold": lambda y: y.unfold(1, 2, 2),
    "detach": lambda y: y.detach(), "chunk": lambda y: y.chunk(3, 1)[-1],
}
OPS = {
    "mul_": lambda v, w: v.mul_(2), "add_": lambda v, w: v.add_(w[: v.numel()].reshape(v.shape), alpha=0.5),
    "zero_": lambda v, w: v.zero_(), "copy_": lambda v, w: v.copy_(w[: v.numel()].reshape(v.shape).exp()),
    "clamp_": lambda v, w: v.clamp_(-0.3, 0.4), "exp_": lambda v, w: v.exp_(), "sigmoid_": lambda v, w: v.sigmoid_(),
    "div_": lambda v, w: v.div_(w[: v.numel()].reshape(v.shape).abs() + 1), "pow_": lambda v, w: v.pow_(2),
    "masked_fill_": lambda v, w: v.masked_fill_(v > 0, 0.0), "tanh_": lambda v, w: v.tanh_(),
}


def _case(r):
    k1, k2 = sorted(VIEWS)[int(r.integers(len(VIEWS)))], sorted(VIEWS)[int(r.integers(len(VIEWS)))]
    o1, o2 = sorted(OPS)[int(r.integers(len(OPS)))], sorted(OPS)[int(r.integers(len(OPS)))]
    two, post = bool(r.integers(2)), int(r.integers(3))

    def fn(x, w):
        y = x * 1.5
        v = VIEWS[k1](y)
        OPS[o1](v, w)
        if two:
            OPS[o2](VIEWS[k2](y), w)
        if post == 0:
            return y, v * 1
        if post == 1:
            return (y * y).sum(), v.cos()
        return y.sin() + 1,
    return fn, dict(k1=k1, o1=o1, k2=k2 if two else None, o2=o2 if two else None, post=post)


def _run(lib, fn, x, w, compiled=False):
    xt = lib.tensor(x).requires_grad_(True)
    outs = (tj.compile(fn) if compiled else fn)(xt, lib.tensor(w))
    sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(o.shape) % 3 - 1)).sum() for o in outs).backward()
    return [o.detach().numpy() for o in outs] + [xt.grad.numpy()]


@pytest.mark.parametrize("compiled", [False, True])
def test_random_view_writes_match_torch(compiled):
    for seed in range(50 if not compiled else 20):
        r = np.random.default_rng(seed)
        fn, info = _case(r)
        x, w = r.standard_normal((4, 4)), r.standard_normal(16)
        try:
            want = _run(torch, fn, x, w)
        except RuntimeError:
            try:   # (PyTorch refuses; its functionalized program's values)
                want = _run(torch, lambda *a: functionalize(fn)(*a), x, w)
            except RuntimeError:
                continue
        got = _run(tj, fn, x, w, compiled)
        for k, (g, wv) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, wv, rtol=1e-10, atol=1e-10, err_msg=f"seed {seed} {info} result {k}")


@pytest.mark.parametrize("view", [False, True])
def test_no_grad_write_into_an_argument_keeps_its_gradient(view):
    # eagerly the leaf stays a leaf: its later uses give it their gradient
    def fn(x, w):
        with tj.no_grad():
            (x[0] if view else x).mul_(2)
        return x * w
    w = np.arange(6.0).reshape(2, 3)
    x = tj.ones(2, 3, requires_grad=True)
    out = tj.compile(fn)(x, tj.tensor(w))
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), w)
    np.testing.assert_array_equal(x.detach().numpy(), [[2.0] * 3, [1.0 if view else 2.0] * 3])


def test_no_grad_write_through_a_view_of_an_intermediate():
    def fn(lib, x, w):
        y = x * 1
        v = y[0]
        with lib.no_grad():
            v.mul_(2)
        return v * w[0], y * w
    w = np.arange(6.0).reshape(2, 3)
    xt = torch.ones(2, 3, requires_grad=True)
    sum(o.sum() for o in fn(torch, xt, torch.tensor(w))).backward()
    x = tj.ones(2, 3, requires_grad=True)
    sum(o.sum() for o in tj.compile(lambda x, w: fn(tj, x, w))(x, tj.tensor(w))).backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_write_through_a_view_of_a_leaf_refused_compiled():
    def fn(x):
        x[0].mul_(2)
        return x * 1
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        tj.compile(fn)(tj.ones(2, 3, requires_grad=True))
