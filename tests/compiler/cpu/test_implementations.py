"""The plan calls the CPU implementation table gives eager signatures (compiler/cpu/
implementations.py, row_forms' `*_call`): the same values as the table's runner, bit for
bit, and PyTorch's, for small and large shapes in float32 and float64."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

import tracejit as tj  # noqa: E402
import tracejit.nn.functional as F  # noqa: E402
from tracejit.compiler.cpu.kernels import row_forms  # noqa: E402
from tracejit.ops import impls  # noqa: E402
from tracejit.ops.cross_entropy_prim import CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD  # noqa: E402
from tracejit.ops.layer_norm_prim import LAYER_NORM  # noqa: E402
from tracejit.ops.log_softmax_prim import LOG_SOFTMAX  # noqa: E402
from tracejit.ops.elementwise_logic import CAST  # noqa: E402
from tracejit.ops.reductions import ARGMAX, ARGMIN  # noqa: E402
from tracejit.ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD  # noqa: E402

SHAPES = [(1, 2), (3, 5), (64, 300)]
DTYPES = [np.float32, np.float64]


@pytest.fixture(autouse=True)
def _kernels_now(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")


def _plan_call(prim, arrays, params):
    call = impls.specialized(prim, tuple(a.shape for a in arrays), arrays[0].dtype, params)
    assert call is not None
    return call


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_and_its_backward_match_the_runner_and_torch(shape, dtype):
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
    fwd = _plan_call(SOFTMAX, [x], {"dim": 1})
    bwd = _plan_call(SOFTMAX_BACKWARD, [g, x], {"dim": 1})
    y = SOFTMAX.dispatch(np, x, dim=1)
    for _ in range(3):   # (the first calls may plan; later ones run the kept kernel)
        np.testing.assert_array_equal(fwd(x), y)
        np.testing.assert_array_equal(bwd(g, y), SOFTMAX_BACKWARD.dispatch(np, g, y, dim=1))
    # a strided operand of the same shape: the same values
    wide = np.repeat(x, 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(fwd(wide), y)
    # the eager op, planned, against PyTorch
    for _ in range(3):
        xt = tj.tensor(x, requires_grad=True)
        out = F.softmax(xt, dim=1)
        (out * tj.tensor(g)).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    ref = torch.softmax(xr, dim=1)
    (ref * torch.tensor(g)).sum().backward()
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=10 * tol, atol=10 * tol)


def test_log_softmax_runs_its_rows_kernel_and_matches_torch():
    from tracejit.compiler.cpu.kernels import row_forms
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    fwd = _plan_call(LOG_SOFTMAX, [x], {"dim": 1})
    y = LOG_SOFTMAX.dispatch(np, x, dim=1)
    for _ in range(3):
        np.testing.assert_array_equal(fwd(x), y)
    assert any(k[0] is LOG_SOFTMAX for k in row_forms._calls)   # the kernel ran, not the numpy form
    xt = tj.tensor(x, requires_grad=True)
    F.log_softmax(xt, dim=1).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    ref = torch.log_softmax(xr, dim=1)
    ref.sum().backward()
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_off_the_last_dim_runs_the_lanes_kernel(monkeypatch):
    """Off the last dim the plan call runs the rows form in lanes (kernels/lane_forms.py),
    never the numpy form, with the kernel's own bits, and PyTorch's values."""
    from tracejit.compiler.cpu.kernels import lane_forms
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    want = lane_forms.run_middle(SOFTMAX, (x,), {"dim": 0, "scale": 1.0})
    assert want is not None, "the lanes kernel did not load"
    call = _plan_call(SOFTMAX, [x], {"dim": 0})
    monkeypatch.setattr(SOFTMAX, "impl", lambda *a, **k: pytest.fail("the numpy form ran"))
    np.testing.assert_array_equal(call(x), want)
    np.testing.assert_allclose(call(x), torch.softmax(torch.tensor(x), dim=0).numpy(), rtol=1e-6)


@pytest.mark.parametrize("n,c", [(1, 2), (4, 3), (256, 10)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_the_runner_and_torch(n, c, dtype, reduction):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c)).astype(dtype)
    t = rng.integers(0, c, n)
    t[0] = -100   # an ignored row
    params = {"ignore_index": -100, "reduction": reduction}
    call = _plan_call(CROSS_ENTROPY, [x, t], params)
    want = CROSS_ENTROPY.dispatch(np, x, t, **params)
    for _ in range(3):
        np.testing.assert_array_equal(call(x, t), want)
    for _ in range(3):
        got = F.cross_entropy(tj.tensor(x), tj.tensor(t), reduction=reduction)
    ref = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t), reduction=reduction)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("n,c", [(1, 2), (4, 3), (256, 10)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_backward_matches_the_runner_and_torch(n, c, dtype, reduction):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c)).astype(dtype)
    t = rng.integers(0, c, n)
    t[0] = -100
    g = rng.standard_normal(n if reduction == "none" else ()).astype(dtype)
    params = {"ignore_index": -100, "reduction": reduction}
    call = _plan_call(CROSS_ENTROPY_BACKWARD, [g, x, t], params)
    want = CROSS_ENTROPY_BACKWARD.dispatch(np, g, x, t, **params)
    for _ in range(3):
        np.testing.assert_array_equal(call(g, x, t), want)
    for _ in range(3):   # the eager backward node, planned, against PyTorch
        xt = tj.tensor(x, requires_grad=True)
        F.cross_entropy(xt, tj.tensor(t), reduction=reduction).backward(tj.tensor(g))
    xr = torch.tensor(x, requires_grad=True)
    torch.nn.functional.cross_entropy(xr, torch.tensor(t), reduction=reduction).backward(torch.tensor(g))
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,n", [((4, 1, 128), 1), ((3, 5), 1), ((2, 3, 4), 2), ((64, 300), 1)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_layer_norm_matches_the_runner_and_torch(shape, n, dtype, affine):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(dtype)
    wb = [rng.standard_normal(shape[-n:]).astype(dtype) for on in affine if on]
    params = {"n": n, "eps": 1e-5, "affine": affine}
    call = _plan_call(LAYER_NORM, [x, *wb], params)
    want = LAYER_NORM.dispatch(np, x, *wb, **params)
    for _ in range(3):
        np.testing.assert_array_equal(call(x, *wb), want)
    np.testing.assert_array_equal(call(np.repeat(x, 2, axis=-1)[..., ::2], *wb), want)   # strided
    wb_ref = [torch.tensor(a) for a in wb] + [None] * (2 - len(wb))
    ref = torch.nn.functional.layer_norm(torch.tensor(x), shape[-n:], *wb_ref)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(want, ref.numpy(), rtol=tol, atol=tol)


def test_cross_entropy_plan_refuses_a_target_out_of_range():
    x = np.zeros((3, 4), np.float32)
    call = _plan_call(CROSS_ENTROPY, [x, np.zeros(3, np.int64)], {"ignore_index": -100, "reduction": "mean"})
    call(x, np.array([0, 1, 2]))
    with pytest.raises(IndexError):
        call(x, np.array([0, 4, 2]))


@pytest.mark.parametrize("prim,ref", [(ARGMAX, torch.argmax), (ARGMIN, torch.argmin)])
@pytest.mark.parametrize("shape", [(1, 2), (5, 7), (64, 300)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_argmin_match_the_runner_and_torch(prim, ref, shape, dtype):
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    for dim in (0, 1):
        for keepdim in (False, True):
            params = {"dim": dim, "keepdim": keepdim}
            call = impls.specialized(prim, (shape,), x.dtype, params)
            got = call(x) if call is not None else prim.dispatch(np, x, **params)
            np.testing.assert_array_equal(got, prim.dispatch(np, x, **params))
            np.testing.assert_array_equal(got, ref(torch.tensor(x), dim=dim, keepdim=keepdim).numpy())
            assert got.flags.c_contiguous
    # from the kernel's size and row length the table decides: a row longer than its one
    # scan, or a small tensor, is numpy's ((64, 300): dim 0 the kernel's, dim 1 numpy's)
    for dim in (0, 1):
        kernel = x.size >= 2048 and shape[dim] <= row_forms.one_scan()
        assert (impls.specialized(prim, (shape,), np.dtype(dtype), {"dim": dim, "keepdim": False}) is None) \
            == kernel


@pytest.mark.parametrize("src,dst", [(np.float32, tj.float64), (np.float64, tj.float32),
                                     (np.float32, tj.int64)])
def test_cast_plan_is_the_numpy_form(src, dst):
    x = (np.random.default_rng(4).standard_normal((3, 5)) * 10).astype(src)
    call = _plan_call(CAST, [x], {"dtype": dst})
    np.testing.assert_array_equal(call(x), CAST.dispatch(np, x, dtype=dst))
    np.testing.assert_array_equal(call(x), torch.tensor(x).to(getattr(torch, str(dst).split(".")[-1])).numpy())


def test_bf16_casts_stay_with_the_table():
    assert impls.specialized(CAST, ((4,),), np.dtype(np.float32), {"dtype": tj.bfloat16}) is None
    x = np.arange(8, dtype=np.float32)
    for _ in range(3):
        y = tj.tensor(x).to(tj.bfloat16).to(tj.float32)
    np.testing.assert_array_equal(y.numpy(), x)
