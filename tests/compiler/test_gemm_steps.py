"""A product and its epilogue as one plan step (compiler/gemm_steps.py): ``act(x @ w + b +
r)`` after a matmul step becomes one `GemmStep` (the template's epilogue where the choice
says, else BLAS and the group's kernel in place; a bias alone: the output filled with b,
one GEMM with beta=1); other elementwise work after a product stays a kernel.

Programs are checked against eager and the IR interpreter (values and gradients), the
runtime `matmul_bias` against numpy on every operand layout it takes or falls back on.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.gemm import epilogue
from tracejit.compiler.cpu.gemm.epilogue import matmul_bias
from tracejit.compiler.gemm_steps import GemmStep
from tracejit.compiler.fusion import Group
from differential import assert_compiled_matches
from inputs import T, training_variant


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _steps(cf):
    fwd = training_variant(cf)[0]
    return [it.products[0] for it in fwd.items if isinstance(it, GemmStep)], fwd


def _inference_steps(fn, *args, **tol):
    """`fn` compiled without gradients, checked against eager: its plan's product steps."""
    args = [T(*a.shape, seed=i, dtype=a.detach().numpy().dtype, rg=False) for i, a in enumerate(args)]
    cf = assert_compiled_matches(fn, *args, **tol)
    plan = cf._entries[-1].executor.infer_plan()
    return [it.products[0] for it in plan.items if isinstance(it, GemmStep)], plan


def linear(x, w, b):
    return F.linear(x, w, b)


@pytest.mark.parametrize("mode", ["trace", "script"])
@pytest.mark.parametrize("xshape", [(6, 8), (2, 5, 8)], ids=["2-D", "3-D"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_bias_is_one_gemm_step(xshape, dtype, mode):
    x, w, b = T(*xshape, seed=1, dtype=dtype), T(12, 8, seed=2, dtype=dtype), T(12, seed=3, dtype=dtype)
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else {}
    cf = assert_compiled_matches(linear, x, w, b, mode=mode, **tol)
    (step,), fwd = _steps(cf)
    assert step.bias.aval.shape == (12,)
    assert not any(isinstance(it, Group) for it in fwd.items), fwd.describe()


def test_bias_on_the_left_and_a_row_vector_bias():
    def f(x, w, b):
        return b + x @ w
    cf = assert_compiled_matches(f, T(6, 8, seed=1), T(8, 5, seed=2), T(1, 5, seed=3), rtol=2e-5, atol=2e-6)
    (step,), _ = _steps(cf)
    assert step.bias.aval.shape == (1, 5)


def test_bias_and_relu_are_one_step_without_gradients():
    # with gradients the forward keeps the product's output for the backward (no fold)
    def f(x, w, b):
        return tj.relu(F.linear(x, w, b))
    (p,), plan = _inference_steps(f, T(6, 8), T(12, 8), T(12), rtol=2e-5, atol=2e-6)
    assert (p.act, p.residual, tuple(p.bias.aval.shape)) == ("relu", None, (12,))
    assert not any(isinstance(it, Group) for it in plan.items), plan.describe()
    assert "EPI_" not in plan.source     # below the template's size: BLAS and the kernel only


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_residual_relu_epilogue_step(dtype):
    def f(x, w, b, r):
        return tj.relu(F.linear(x, w, b) + r)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else {}
    (p,), plan = _inference_steps(f, T(3, 70, 90, dtype=dtype), T(65, 90, dtype=dtype), T(65, dtype=dtype),
                                  T(3, 70, 65, dtype=dtype), **tol)
    assert p.act == "relu" and p.residual.aval.shape == (3, 70, 65) and p.bias.aval.shape == (65,)
    assert "EPI_" in plan.source and not any(isinstance(it, Group) for it in plan.items), plan.describe()


def test_other_groups_after_a_product_stay_kernels():
    def scaled(x, w, b):
        return F.linear(x, w, b) * 2.0

    def bias_after_residual(x, w, b):
        return (x @ w.T + x[:, :12]) + b
    for fn in (scaled, bias_after_residual):
        steps, plan = _inference_steps(fn, T(6, 16), T(12, 16), T(12), rtol=2e-5, atol=2e-6)
        assert not steps and any(isinstance(it, Group) for it in plan.items), plan.describe()


def test_switched_off_keeps_the_add(monkeypatch):
    monkeypatch.setenv("TRACEJIT_BIAS_GEMM", "0")
    cf = assert_compiled_matches(linear, T(6, 8, seed=1), T(12, 8, seed=2), T(12, seed=3),
                                 rtol=2e-5, atol=2e-6)
    assert not _steps(cf)[0]


LAYOUTS = {
    "x C, w C": lambda x, w: (x, w),
    "x C, w transposed": lambda x, w: (x, np.ascontiguousarray(w.T).T),
    "x strided (fallback)": lambda x, w: (np.asfortranarray(x), w),
    "w strided (fallback)": lambda x, w: (x, np.repeat(w, 2, axis=1)[:, ::2]),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_matmul_bias_runtime_matches_numpy(layout, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((33, 17)) * 4).astype(dtype)
    w = (rng.standard_normal((17, 9)) * 4).astype(dtype)
    b = (rng.standard_normal(9) * 4).astype(dtype)
    x, w = LAYOUTS[layout](x, w)
    got = matmul_bias(np, x, w, b.reshape(1, 9))
    want = x @ w + b
    assert got.dtype == want.dtype and got.shape == (33, 9)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_matmul_bias_runtime_nd_and_empty():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(matmul_bias(np, x, w, b), x @ w + b, rtol=1e-5, atol=1e-6)
    assert matmul_bias(np, x[:0], w, b).shape == (0, 3, 5)


@pytest.mark.parametrize("threads", [1, 2])
def test_bias_fill_is_exactly_the_bias_in_every_row(monkeypatch, threads):
    # a large fill on two BLAS threads is the k=1 product ones @ b (beta=0 over a NaN-filled
    # output); on one thread numpy's assignment: every row holds the bias bit for bit
    monkeypatch.setattr(epilogue, "FILL_MIN", 1)
    monkeypatch.setattr(epilogue, "blas_threads", lambda: threads)
    products = []
    gemm = epilogue._cblas("float32")
    if gemm is None:
        pytest.skip("numpy's BLAS exposes no cblas_sgemm here")

    def spy(*args):
        products.append(args[3:6])
        return gemm(*args)
    rng = np.random.default_rng(3)
    row = (rng.standard_normal(11) * 1e3).astype(np.float32)
    row[4] = np.inf
    out = np.full((37, 11), np.nan, np.float32)
    epilogue._fill(spy, out, row, 37, 11)
    np.testing.assert_array_equal(out, np.broadcast_to(row, out.shape))
    assert products == ([(37, 11, 1)] if threads == 2 else [])
    x = rng.standard_normal((37, 16)).astype(np.float32)
    w = rng.standard_normal((16, 11)).astype(np.float32)
    row[4] = 0.5
    np.testing.assert_allclose(matmul_bias(np, x, w, row), x @ w + row, rtol=1e-5, atol=1e-4)


def test_bias_gradient_sum_over_rows_matches_eager():
    # the linear's output gradient comes from a GEMM (through the `@ y`), so no kernel reads
    # it elementwise: the bias gradient is a sum over the (2, 6) rows of its own
    def f(x, w, b, y):
        return F.linear(x, w, b) @ y
    assert_compiled_matches(f, T(2, 6, 8, seed=1), T(12, 8, seed=2), T(12, seed=3), T(12, 5, seed=4),
                            rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dims", [(0,), (0, 1)], ids=["2-D rows", "3-D leading dims"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_leading_dims_sum_of_a_product_matches_eager(dims, keepdim):
    def f(x, y):
        return (x @ y).sum(dim=dims, keepdim=keepdim)
    shape = (9, 4) if dims == (0,) else (3, 9, 4)
    assert_compiled_matches(f, T(*shape, seed=1), T(4, 7, seed=2), rtol=2e-5, atol=2e-5)


def test_self_attention_projection_and_its_bias_gradient():
    # the packed q/k/v projection's bias add has nothing to fuse with (the heads are cut out
    # of it by views): one GEMM step
    tj.manual_seed(0)
    mha = tj.nn.MultiheadAttention(16, 2, batch_first=True)

    def f(x):
        return mha(x, x, x, need_weights=False)[0] * 1.5
    cf = assert_compiled_matches(f, T(3, 5, 16, seed=1), rtol=2e-5, atol=2e-5)
    fwd = training_variant(cf)[0]
    steps = [it.products[0] for it in fwd.items if isinstance(it, GemmStep)]
    assert [tuple(s.bias.aval.shape) for s in steps] == [(48,)], fwd.describe()
    # the parameters' gradients (captured, not leaves of the helper) against eager's
    x = T(3, 5, 16, seed=2)
    grads = []
    for fn in (f, cf):
        mha.zero_grad()
        (fn(x) * T(3, 5, 16, seed=3, rg=False)).sum().backward()
        grads.append([p.grad.numpy().copy() for p in (mha.in_proj_bias, mha.in_proj_weight)])
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_cblas_by_numpy_dtype_as_by_name():
    """matmul_bias asks for the GEMM by the operands' numpy dtype (not ``dtype.name``, which
    is Python code in numpy): the same library function as by name, None for other dtypes."""
    by_name = epilogue._cblas("float32")
    if by_name is None:
        pytest.skip("numpy's BLAS exposes no cblas_sgemm here")
    got = epilogue._cblas(np.dtype(np.float32))
    assert got is epilogue._cblas(np.dtype(np.float32))          # looked up once
    assert ctypes.cast(got, ctypes.c_void_p).value == ctypes.cast(by_name, ctypes.c_void_p).value
    assert epilogue._cblas(np.dtype(np.int32)) is None
    assert epilogue._cblas(np.dtype(np.float64)) is not None
