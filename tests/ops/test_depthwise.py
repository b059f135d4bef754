"""Depthwise convolution (ops/depthwise.py's three primitives, conv2d and conv1d with
``groups`` = input channels) against PyTorch with the same weights: the value and both
gradients, eager and compiled, over kernel sizes, strides, padding ('same' too), dilation,
channel multipliers, a batch of one, non-square and non-contiguous inputs, with and
without a bias; the numpy forms against PyTorch; the gradient primitives' own gradients.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.ops import depthwise as D

# (N, C, H, W, multiplier, kernel, stride, padding, dilation, bias)
CASES = [
    (2, 4, 7, 9, 1, (3, 3), 1, 1, 1, True),
    (1, 3, 8, 5, 2, (5, 3), (2, 1), (3, 0), (2, 1), False),
    (3, 6, 9, 9, 1, (7, 7), 2, 3, 1, True),
    (2, 2, 5, 6, 2, (1, 1), (1, 2), (0, 1), 1, False),
    (1, 5, 10, 7, 1, (3, 3), 1, "same", 2, True),
    (2, 3, 11, 12, 2, (5, 5), 2, 0, 1, True),
    (1, 4, 6, 6, 1, (3, 3), 2, 1, 1, False),
    (2, 3, 7, 8, 2, (3, 5), 1, (2, 1), 1, True),      # unit stride, the taps unrolled
    (1, 2, 12, 11, 1, (9, 9), 1, 4, 1, False),        # more taps than are unrolled
]


def _torch_conv(torch, x, w, b, stride, padding, dilation, groups, u):
    tx = torch.tensor(np.ascontiguousarray(x), requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    tb = None if b is None else torch.tensor(b, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw, tb, stride, padding, dilation, groups)
    y.backward(torch.tensor(u))
    return [y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()] + ([] if b is None else [tb.grad.numpy()])


def _data(case, dtype, contiguous=True):
    n, c, h, w, m, k, s, p, d, bias = case
    rng = np.random.default_rng(abs(hash(case)) % 1000)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    if not contiguous:     # a transposed view: (N, C, W, H) memory
        x = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    wt = rng.standard_normal((c * m, 1) + k).astype(dtype)
    b = rng.standard_normal(c * m).astype(dtype) if bias else None
    return rng, x, wt, b


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_depthwise_conv2d_and_gradients_match_torch(case, dtype, compiled):
    torch = pytest.importorskip("torch")
    n, c, h, w, m, k, s, p, d, bias = case
    rng, x, wt, b = _data(case, dtype, contiguous=case[0] != 1)
    shape = torch.nn.functional.conv2d(torch.tensor(np.ascontiguousarray(x)), torch.tensor(wt), None,
                                       s, p, d, c).shape
    u = rng.standard_normal(tuple(shape)).astype(dtype)
    ref = _torch_conv(torch, x, wt, b, s, p, d, c, u)

    def loss(xx, ww, bb):
        return (F.conv2d(xx, ww, bb, s, p, d, c) * tj.tensor(u)).sum()
    jx, jw = tj.tensor(x, requires_grad=True), tj.tensor(wt, requires_grad=True)
    jb = None if b is None else tj.tensor(b, requires_grad=True)
    f = tj.script(loss) if compiled else loss
    for _ in range(2 if compiled else 1):
        for t in (jx, jw, jb):
            if t is not None:
                t.grad = None
        f(jx, jw, jb).backward()
    y = F.conv2d(jx, jw, jb, s, p, d, c).detach().numpy()
    got = [y, jx.grad.numpy(), jw.grad.numpy()] + ([] if b is None else [jb.grad.numpy()])
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, r in zip(got, ref):
        assert a.shape == r.shape and a.dtype == dtype
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("case", CASES[:4])
def test_numpy_forms_match_torch(case):
    torch = pytest.importorskip("torch")
    n, c, h, w, m, k, s, p, d, bias = case
    rng, x, wt, b = _data(case, np.float64)
    geo = dict(kernel=k, stride=(s, s) if isinstance(s, int) else s, padding=(p, p) if isinstance(p, int) else p,
               dilation=(d, d) if isinstance(d, int) else d)
    u = rng.standard_normal(D._fwd_impl(np, x, wt, **geo).shape)
    ref = _torch_conv(torch, x, wt, b, geo["stride"], geo["padding"], geo["dilation"], c, u)
    got = [D._fwd_impl(np, x, wt, *(() if b is None else (b,)), **geo),
           D._xgrad_impl(np, u, wt, (h, w), c, **geo), D._wgrad_impl(np, u, x, **geo)]
    for a, r in zip(got, ref):
        np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("compiled", [False, True])
def test_conv1d_depthwise_matches_torch(compiled):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 17)).astype(np.float32)
    wt = rng.standard_normal((12, 1, 5)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, wt, b))
    ty = torch.nn.functional.conv1d(tx, tw, tb, 2, 2, 2, 6)
    u = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(u))
    jx, jw, jb = (tj.tensor(a, requires_grad=True) for a in (x, wt, b))

    def loss(xx, ww, bb):
        return (F.conv1d(xx, ww, bb, 2, 2, 2, 6) * tj.tensor(u)).sum()
    f = tj.script(loss) if compiled else loss
    f(jx, jw, jb).backward()
    np.testing.assert_allclose(F.conv1d(jx, jw, jb, 2, 2, 2, 6).detach().numpy(), ty.detach().numpy(),
                               rtol=2e-4, atol=2e-4)
    for a, r in ((jx, tx), (jw, tw), (jb, tb)):
        np.testing.assert_allclose(a.grad.numpy(), r.grad.numpy(), rtol=2e-4, atol=2e-3)


def test_depthwise_conv2d_is_the_primitive_compiled():
    from tracejit.compiler.cpu.kernels import depthwise_kernels as K
    from tracejit.ops import impls
    for prim, fn in ((D.DEPTHWISE_CONV2D, K.forward), (D.DEPTHWISE_WGRAD, K.wgrad),
                     (D.DEPTHWISE_XGRAD, K.xgrad)):
        assert fn in [getattr(i.fn, "__wrapped__", i.fn) for i in impls.implementations(prim)]
    conv = tj.nn.Conv2d(4, 8, 3, padding=1, groups=4)
    f = tj.script(lambda x: conv(x).sum())
    f(tj.tensor(np.ones((2, 4, 6, 6), np.float32), requires_grad=True)).backward()
    names = [e.prim.name for e in f.entries[0].opt_graph.eqns]
    assert "depthwise_conv2d" in names and "unfold" not in names, names


def test_gradient_primitives_have_gradients():
    """depthwise_wgrad and depthwise_xgrad differentiate (double backward) as finite
    differences do."""
    rng = np.random.default_rng(11)
    x0 = rng.standard_normal((2, 3, 6, 5))
    w0 = rng.standard_normal((6, 1, 3, 2))
    g0 = rng.standard_normal((2, 6, 3, 4))
    geo = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 1))

    def f(x, w, g):
        dw = D.depthwise_wgrad(g, x, (3, 2), **geo)
        dx = D.depthwise_xgrad(g, w, (3, 6, 5), **geo)
        return (dw * dw).sum() + (dx * dx).sum()
    args = [tj.tensor(a, requires_grad=True) for a in (x0, w0, g0)]
    f(*args).backward()
    eps = 1e-6
    for i, a0 in enumerate((x0, w0, g0)):
        idx = tuple(rng.integers(0, s) for s in a0.shape)
        up, dn = [a.copy() for a in (x0, w0, g0)], [a.copy() for a in (x0, w0, g0)]
        up[i][idx] += eps
        dn[i][idx] -= eps
        num = (f(*map(tj.tensor, up)).item() - f(*map(tj.tensor, dn)).item()) / (2 * eps)
        assert abs(args[i].grad.numpy()[idx] - num) < 1e-5 * max(1.0, abs(num))


def test_shape_errors_name_the_operands():
    x = tj.tensor(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(tj.errors.ShapeError, match="depthwise_conv2d"):
        D.depthwise_conv2d(x, tj.tensor(np.zeros((4, 1, 3, 3), np.float32)))
    with pytest.raises(tj.errors.ShapeError, match="depthwise_conv2d"):
        D.depthwise_conv2d(x, tj.tensor(np.zeros((3, 2, 3, 3), np.float32)))
    with pytest.raises(tj.errors.ShapeError, match="depthwise_wgrad"):
        D.depthwise_wgrad(tj.tensor(np.zeros((1, 3, 3, 3), np.float32)), x, (3, 3))
    with pytest.raises(tj.errors.ShapeError, match="larger than the input"):
        D.depthwise_conv2d(x, tj.tensor(np.zeros((3, 1, 5, 5), np.float32)))
