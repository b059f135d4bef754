"""softmax, log_softmax and their backwards over a dim before the last, by their rows forms
in lanes (compiler/cpu/kernels/lane_forms.py): values and gradients against PyTorch's for
middle and leading dims, a reduced dim of one, trailing dims of one, non-contiguous input,
float32 and float64, the kernels called directly, eager ops and compiled programs; and the
plan calls of those signatures run the kernels, not the numpy forms."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import lane_forms, row_forms
from tracejit.ops.log_softmax_prim import LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD
from tracejit.ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

CASES = [((3, 5, 7), 1), ((3, 5, 7), 0), ((6, 9), 0), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), 0),
         ((4, 1, 9), 1), ((5, 7, 1), 1), ((2, 70, 3), 1), ((1, 300, 130), 1)]
TOL = {np.float32: 2e-6, np.float64: 1e-13}


def _data(shape, dtype, seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal(shape) * 4).astype(dtype), r.standard_normal(shape).astype(dtype)


def _torch(op, x, g, dim):
    t = torch.tensor(x, requires_grad=True)
    y = getattr(torch, op)(t, dim)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,dim", CASES)
def test_kernels_match_torch(shape, dim, dtype, monkeypatch):
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    x, g = _data(shape, dtype)
    tol = TOL[dtype]
    for op, fwd, bwd in (("softmax", SOFTMAX, SOFTMAX_BACKWARD), ("log_softmax", LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD)):
        y_want, dx_want = _torch(op, x, g, dim)
        params = {"dim": dim, "scale": 1.0} if fwd is SOFTMAX else {"dim": dim}
        y = lane_forms.run_middle(fwd, (x,), params)
        assert y is not None, f"{op}'s lanes kernel did not run"
        assert y.shape == x.shape and y.dtype == x.dtype
        np.testing.assert_allclose(y, y_want, rtol=tol, atol=tol)
        dx = lane_forms.run_middle(bwd, (g, y_want.astype(dtype)), params)
        assert dx is not None, f"{op}'s backward lanes kernel did not run"
        np.testing.assert_allclose(dx, dx_want, rtol=10 * tol, atol=10 * tol)


def test_non_contiguous_and_scaled(monkeypatch):
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    x, g = _data((6, 11, 4), np.float64, seed=2)
    xt = np.swapaxes(x, 0, 2)          # (4, 11, 6), strided
    assert not xt.flags.c_contiguous
    y = lane_forms.run_middle(SOFTMAX, (xt,), {"dim": 1, "scale": 0.5})
    z = xt * 0.5
    e = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-13, atol=1e-15)
    gt = np.swapaxes(g, 0, 2)
    dx = lane_forms.run_middle(SOFTMAX_BACKWARD, (gt, y), {"dim": 1, "scale": 0.5})
    want = 0.5 * y * (gt - (gt * y).sum(1, keepdims=True))
    np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-14)


def test_declines_what_it_does_not_take():
    x = np.ones((3, 4, 5), np.float32)
    assert lane_forms.run_middle(SOFTMAX, (x,), {"dim": 2, "scale": 1.0}) is None       # the last dim
    assert lane_forms.run_middle(SOFTMAX, (x.astype(np.float16),), {"dim": 1}) is None   # float16
    assert lane_forms.run_middle(SOFTMAX_BACKWARD, (x, x[:, :1]), {"dim": 1}) is None    # a broadcast
    assert lane_forms.softmax(x, x, dim=1) is None                                        # a mask
    assert lane_forms.run_middle(SOFTMAX, (np.ones((3, 0, 5), np.float32),), {"dim": 1}) is None


def test_infinities_as_torch(monkeypatch):
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    x = np.zeros((2, 4, 3), np.float32)
    x[0, :, 0] = [1.0, -np.inf, 0.5, 2.0]
    x[1, :, 1] = -np.inf              # a column of -inf: nan, as PyTorch's
    x[1, 2, 2] = np.nan
    for op, prim in (("softmax", SOFTMAX), ("log_softmax", LOG_SOFTMAX)):
        want = getattr(torch, op)(torch.tensor(x), 1).numpy()
        params = {"dim": 1, "scale": 1.0} if prim is SOFTMAX else {"dim": 1}
        with np.errstate(invalid="ignore"):
            got = lane_forms.run_middle(prim, (x,), params)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eager_and_compiled_match_torch(op, dtype, monkeypatch):
    """Eager ops and a compiled program over a middle dim: values and input gradients."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    x, g = _data((4, 9, 6), dtype, seed=3)
    t = torch.tensor(x, requires_grad=True)
    (getattr(torch, op)(t * 2.0, 1) * torch.tensor(g)).sum().backward()
    want = getattr(torch, op)(torch.tensor(x) * 2.0, 1).numpy()

    def f(a, w):
        return getattr(tj, op)(a * 2.0, 1) * w
    for fn in (f, tj.compile(f)):
        for _ in range(2):
            xs = tj.tensor(x, requires_grad=True)
            y = fn(xs, tj.tensor(g))
            y.sum().backward()
            np.testing.assert_allclose(y.detach().numpy(), want * g, rtol=10 * TOL[dtype], atol=10 * TOL[dtype])
            np.testing.assert_allclose(xs.grad.numpy(), t.grad.numpy(), rtol=20 * TOL[dtype], atol=20 * TOL[dtype])


@pytest.mark.parametrize("prim,arity", [(SOFTMAX, 1), (SOFTMAX_BACKWARD, 2), (LOG_SOFTMAX, 1),
                                        (LOG_SOFTMAX_BACKWARD, 2)])
def test_plan_calls_off_the_last_dim_run_the_lanes_kernel(prim, arity, monkeypatch):
    """An eager plan's call for a middle dim runs the lanes kernel (the numpy form only
    while it is not loaded); the last dim keeps the rows kernel's call."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    params = {"dim": 1}
    spec = {SOFTMAX: row_forms.softmax_call, SOFTMAX_BACKWARD: row_forms.softmax_backward_call,
            LOG_SOFTMAX: row_forms.log_softmax_call, LOG_SOFTMAX_BACKWARD: row_forms.log_softmax_backward_call}[prim]
    ran = []
    real = lane_forms.run_middle

    def spy(*a, **k):
        ran.append(a[0])
        return real(*a, **k)
    monkeypatch.setattr(lane_forms, "run_middle", spy)
    monkeypatch.setattr(prim, "impl", lambda *a, **k: pytest.fail("the numpy form ran"))
    x, g = _data((3, 8, 5), np.float32, seed=4)
    call = spec(((3, 8, 5),) * arity, np.float32, params)
    got = call(*((g, x) if arity == 2 else (x,)))
    assert ran == [prim] and got.shape == x.shape
