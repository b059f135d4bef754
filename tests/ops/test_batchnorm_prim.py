"""Training-mode batch norm primitives (ops/batchnorm_prim.py): kernels vs numpy forms, layouts,
gradients vs PyTorch eagerly and compiled, second derivatives through create_graph."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import channel_forms as CF
from tracejit.ops import batchnorm_prim as B
from tracejit.compiler.cpu.kernels import loader as native

pytest.importorskip("numba")


def _inputs(shape, dtype, layout, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)   # a mean far from 0: no cancellation
    if layout == "channel-major":   # eager conv outputs: (C, N, ...) memory seen as (N, C, ...)
        x = np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
    c = shape[1]
    g = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(c).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    return x, g, w, b


def _all_impls(x, g, w, b):
    """(stats, y, (sum g, sum g*xhat), gx) through the one-pass records (their kernels where
    loaded), the input gradient in x's shape."""
    c, size = x.shape[1], x.size
    rec = B.BATCH_NORM_FORWARD.run(np, x, w, b, eps=1e-5)
    st = rec[size:].reshape(2, c)
    bw = B.BN_BACKWARD.run(np, g, x, st, w, eps=1e-5)
    gx = bw[:size].reshape((c, x.shape[0]) + x.shape[2:]).swapaxes(0, 1)
    return st, rec[:size].reshape(x.shape), bw[size:].reshape(2, c), gx


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,layout", [((8, 3, 5, 6), "contiguous"), ((8, 3, 5, 6), "channel-major"),
                                          ((7, 4), "contiguous"), ((5, 3, 9), "channel-major")])
def test_kernels_equal_numpy_forms(monkeypatch, dtype, shape, layout):
    x, g, w, b = _inputs(shape, dtype, layout)
    got = _all_impls(x, g, w, b)
    monkeypatch.setattr(CF, "_run", lambda *a: False)     # the numpy forms
    want = _all_impls(x, g, w, b)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for a, e, name in zip(got, want, ("stats", "y", "reduce", "gx")):
        assert a.shape == e.shape and a.dtype == e.dtype, name
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol * 10, err_msg=name)
    # against plain numpy statistics
    dims = (0,) + tuple(range(2, len(shape)))
    np.testing.assert_allclose(got[0][0], x.mean(dims), rtol=tol)
    np.testing.assert_allclose(got[0][1], x.var(dims), rtol=tol * 10)


def test_kernels_ran():
    """The comparison above is not numpy against numpy: in sync mode the kernels load."""
    x, g, w, b = _inputs((4, 2, 3), np.float32, "contiguous")
    _all_impls(x, g, w, b)
    loaded = {k[1] for k, v in native._kernels.items() if k[0] == "channels" and v.fn is not None}
    assert loaded >= {"forward", "backward"}


def _torch_grads(torch, x, g, w, b, momentum=0.1):
    T = lambda a, rg=False: torch.tensor(a, requires_grad=rg)  # noqa: E731
    X, W, Bt = T(x, True), T(w, True), T(b, True)
    rm, rv = torch.zeros(x.shape[1], dtype=X.dtype), torch.ones(x.shape[1], dtype=X.dtype)
    y = torch.nn.functional.batch_norm(X, rm, rv, W, Bt, True, momentum)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), X.grad.numpy(), W.grad.numpy(), Bt.grad.numpy(), rm.numpy(), rv.numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "channel-major"])
def test_matches_torch_eager_and_compiled(compiled, layout):
    torch = pytest.importorskip("torch")
    x, g, w, b = _inputs((16, 4, 6, 7), np.float32, layout, seed=3)
    bn = tj.nn.BatchNorm2d(4)
    with tj.no_grad():
        bn.weight.copy_(tj.tensor(w))
        bn.bias.copy_(tj.tensor(b))
    fwd = tj.script(bn) if compiled else bn
    X = tj.tensor(x, requires_grad=True)
    y = fwd(X)
    y.backward(tj.tensor(g))
    ty, tgx, tgw, tgb, trm, trv = _torch_grads(torch, x, g, w, b)
    np.testing.assert_allclose(y.detach().numpy(), ty, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(X.grad.numpy(), tgx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.weight.grad.numpy(), tgw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.bias.grad.numpy(), tgb, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), trm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), trv, rtol=1e-5, atol=1e-6)


def test_create_graph_second_derivative_matches_torch():
    """With create_graph the VJP is the differentiable composite: grad of grad equals torch's."""
    torch = pytest.importorskip("torch")
    x, g, w, b = _inputs((6, 3, 4), np.float64, "contiguous", seed=5)
    X, W, Bj = (tj.tensor(a, requires_grad=True) for a in (x, w, b))
    y = tj.nn.functional.batch_norm(X, None, None, W, Bj, True)
    (gx,) = tj.autograd.grad((y * tj.tensor(g)).sum(), [X], create_graph=True)
    (ggx,) = tj.autograd.grad((gx * gx).sum(), [X])
    Xt, Wt, Bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yt = torch.nn.functional.batch_norm(Xt, None, None, Wt, Bt, True)
    (gxt,) = torch.autograd.grad((yt * torch.tensor(g)).sum(), [Xt], create_graph=True)
    (ggxt,) = torch.autograd.grad((gxt * gxt).sum(), [Xt])
    np.testing.assert_allclose(gx.detach().numpy(), gxt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ggx.numpy(), ggxt.numpy(), rtol=1e-8, atol=1e-10)


def test_shape_rule_errors():
    x = tj.randn(4, 3, 2)
    with pytest.raises(ValueError, match=r"batch_norm_train: weight of shape \(2,\) should be \(3,\)"):
        B.batch_norm_train(x, B.batch_norm_stats(x), tj.ones(2), tj.zeros(3), 1e-5)
    with pytest.raises(ValueError, match="at least 2 dims"):
        B.batch_norm_stats(tj.randn(5))


def test_create_graph_through_a_compiled_batchnorm():
    """A compiled module asked for create_graph runs eagerly (jit's fallback), so second
    derivatives through BatchNorm work there too and equal the eager ones."""
    x, g, w, b = _inputs((6, 3, 4, 2), np.float64, "contiguous", seed=9)
    results = []
    for compiled in (False, True):
        bn = tj.nn.BatchNorm2d(3).double()
        with tj.no_grad():
            bn.weight.copy_(tj.tensor(w))
            bn.bias.copy_(tj.tensor(b))
        fwd = tj.script(bn) if compiled else bn
        X = tj.tensor(x, requires_grad=True)
        (gx,) = tj.autograd.grad((fwd(X) * tj.tensor(g)).sum(), [X], create_graph=True)
        (ggx,) = tj.autograd.grad((gx * gx).sum(), [X])
        results.append((gx.detach().numpy(), ggx.numpy()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-10, atol=1e-12)
    assert np.abs(results[0][1]).max() > 0


def test_third_derivative_matches_the_composite():
    """The backward primitives' VJPs are differentiable ops: a third order equals that of
    batch norm written as a composite of tracejit ops. (Not compared with PyTorch here:
    at third order its result differs from both, by ~15%, in this case.)"""
    x, g, w, b = _inputs((5, 2, 3), np.float64, "contiguous", seed=11)

    def composite(X, W, B):
        mu = X.mean((0, 2), keepdim=True)
        xc = X - mu
        var = (xc * xc).mean((0, 2), keepdim=True)
        return xc * tj.rsqrt(var + 1e-5) * W.reshape(1, -1, 1) + B.reshape(1, -1, 1)

    def third(bn):
        X, W, B = (tj.tensor(a, requires_grad=True) for a in (x, w, b))
        y = (bn(X, W, B) * tj.tensor(g)).sum()
        gx, gw = tj.autograd.grad(y, [X, W], create_graph=True)
        ggx, ggw = tj.autograd.grad((gx * gx * gx).sum() + (gw * gw * gw).sum(), [X, W],
                                    create_graph=True)
        return (gx, gw, ggx, ggw) + tuple(tj.autograd.grad((ggx * ggx).sum(), [X, W]))

    got = third(lambda X, W, B: tj.nn.functional.batch_norm(X, None, None, W, B, True))
    want = third(composite)
    for a, e in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), e.detach().numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("layout", ["contiguous", "channel-major"])
def test_numpy_forms_float16_and_record_forms(monkeypatch, layout):
    """The numpy forms' per-channel sums (in the array's memory order) against float64 numpy,
    float16 included (its sums accumulate in float32, as numpy's mean of float16); the
    one-pass records' numpy forms hold what the two-primitive forms give, bit for bit."""
    monkeypatch.setattr(CF, "_run", lambda *a: False)
    for dtype, tol in ((np.float16, 2e-3), (np.float32, 2e-6)):
        x, g, w, b = _inputs((6, 3, 7, 5), dtype, layout, seed=4)
        st = B.BATCH_NORM_STATS.run(np, x)
        x64 = x.astype(np.float64)
        assert st.dtype == dtype
        np.testing.assert_allclose(st[0], x64.mean((0, 2, 3)), rtol=tol)
        np.testing.assert_allclose(st[1], x64.var((0, 2, 3)), rtol=20 * tol)
        red = B.BN_BACKWARD_REDUCE.run(np, g, x, st, 1e-5)
        xc = x64 - st[0].astype(np.float64).reshape(1, -1, 1, 1)
        rstd = 1 / np.sqrt(st[1].astype(np.float64) + 1e-5)
        np.testing.assert_allclose(red[0], g.astype(np.float64).sum((0, 2, 3)), rtol=tol, atol=tol)
        np.testing.assert_allclose(red[1], (g * xc).sum((0, 2, 3)) * rstd, rtol=20 * tol,
                                   atol=20 * tol)
        y = B.BATCH_NORM_TRAIN.run(np, x, st, w, b, 1e-5)
        assert y.flags.c_contiguous
        rec = B.BATCH_NORM_FORWARD.run(np, x, w, b, 1e-5)
        assert rec[:x.size].tobytes() == y.tobytes() and rec[x.size:].tobytes() == st.tobytes()
        gx = B.BN_BACKWARD_INPUT.run(np, g, x, st, w, red, 1e-5)
        bw = B.BN_BACKWARD.run(np, g, x, st, w, 1e-5)
        c = x.shape[1]
        assert bw[:-2 * c].tobytes() == np.ascontiguousarray(np.swapaxes(gx, 0, 1)).tobytes()
        assert bw[-2 * c:].tobytes() == red.tobytes()
