"""The products' routes (compiler/cpu/gemm/products.py): a few rows by a wide transposed
weight run as (w @ x.T).T, on every path that computes x @ w.T, with the values of
numpy's product and a C-contiguous result."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.gemm import products
from tracejit.ops import impls, linalg


@pytest.fixture
def openblas(monkeypatch):
    monkeypatch.setattr(products, "_blas_name", [True])


@pytest.fixture
def one_blas_thread(monkeypatch):
    """BLAS on one thread, not adapted to the machine's load during the test: a bitwise
    comparison of two products must not see the thread count change between them."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(coreshare, "ENABLED", False)
    with threads.blas_threads_set(1):
        yield


@pytest.fixture
def blas_only(monkeypatch):
    # (no measurement queued for these keys: a background race would move the BLAS thread
    # count later products run on)
    monkeypatch.setenv("TRACEJIT_GEMM_CHOICE", "0")


@pytest.mark.parametrize("m,k,n,dtype,want", [
    (5, 128, 384, np.float32, True), (2, 64, 1024, np.float32, True), (32, 256, 512, np.float32, True),
    (8, 768, 3072, np.float32, True),      # float32: no bound on the size
    (64, 7744, 289, np.float32, True),     # a convolution's weight gradient: a long inner dim
    (10, 7744, 289, np.float32, True),
    (4, 1024, 256, np.float32, True),      # an output within the small kernel's, 2**20 multiply-adds
    (1, 128, 2048, np.float32, False),     # one row: BLAS's matrix-vector product
    (33, 128, 384, np.float32, False),     # an inner dim under 4x the rows: the copy costs more
    (512, 16, 1024, np.float32, False),
    (5, 16, 512, np.float32, False),       # a shallow inner dim: the small kernel takes it
    (5, 128, 240, np.float32, False),      # an output of 1200 elements: the small kernel too
    (32, 43264, 10, np.float32, False),    # more rows in x than in w: the swap loses
    (64, 7744, 64, np.float32, False),     # as many: nothing to gain
    (5, 128, 384, np.float64, True), (8, 768, 3072, np.float64, False),
    (5, 128, 384, np.int64, False)])
def test_rows_first_rule(openblas, m, k, n, dtype, want):
    assert products.rows_first(m, k, n, dtype) is want


def test_rows_first_is_never_both_ways_nor_symbolic(openblas):
    for m in (2, 8, 64, 512):
        for n in (2, 8, 64, 512):
            for k in (16, 4096):
                assert not (products.rows_first(m, k, n, np.float32) and products.rows_first(n, k, m, np.float32))
    assert not products.rows_first(64, object(), 289, np.float32)


def test_another_blas_keeps_the_transposed_product(monkeypatch):
    monkeypatch.setattr(products, "_blas_name", [False])
    assert not products.rows_first(5, 128, 384, np.float32)


@pytest.mark.parametrize("m,k,n", [(5, 128, 384), (16, 256, 1100)])   # (BLAS's route, beyond tiny)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plan_calls_give_numpys_product(openblas, one_blas_thread, m, k, n, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    want = x @ w.T
    nt = impls.specialized(linalg.MATMUL_NT, ((m, k), (n, k)), dtype, {})
    mm = impls.specialized(linalg.MATMUL, ((m, k), (k, n)), dtype, {})
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for _ in range(2):   # (the first call may bind a call site)
        got = nt(x, w)
        assert got.flags.c_contiguous and got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 10)
        # x @ w.T by a transposed view takes the record's route: bitwise its values
        np.testing.assert_array_equal(mm(x, w.T), got)
        np.testing.assert_array_equal(mm(x, np.ascontiguousarray(w.T)), x @ np.ascontiguousarray(w.T))
        # the implementation a call without a plan runs, too
        np.testing.assert_array_equal(products.matmul_nt(x, w), got)


def test_linear_on_a_few_tokens_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 128)).astype(np.float32)
    w = rng.standard_normal((384, 128)).astype(np.float32)
    b = rng.standard_normal(384).astype(np.float32)
    xt, wt, bt = (tj.tensor(a, requires_grad=True) for a in (x, w, b))
    y = tj.nn.functional.linear(xt, wt, bt)
    y.square().sum().backward()
    xr, wr, br = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yr = torch.nn.functional.linear(xr, wr, br)
    yr.square().sum().backward()
    assert y.stride() == yr.stride()
    np.testing.assert_allclose(y.detach().numpy(), yr.detach().numpy(), rtol=1e-5, atol=1e-4)
    for g, gr in ((xt.grad, xr.grad), (wt.grad, wr.grad), (bt.grad, br.grad)):
        np.testing.assert_allclose(g.numpy(), gr.numpy(), rtol=1e-4, atol=1e-3)


# (last in the file: their large products move BLAS's thread count with the load, and the
# count can change the last bits of a sum `test_plan_calls_give_numpys_product` compares)
@pytest.mark.parametrize("m,k,n", [(5, 128, 384), (64, 2048, 289), (289, 2048, 64), (3, 16, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_orientations_give_numpys_product(openblas, blas_only, m, k, n, dtype):
    """Each form (x @ w.T, and (w @ x.T).T with x copied transposed or not) of the rule's
    yes and no shapes: numpy's values, C-contiguous."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    rtol = 1e-4 if dtype == np.float32 else 1e-12
    forms = [products._rows_first(products.blas_matmul), products._SMALL_ROWS_FIRST, products.matmul_nt,
             impls.specialized(linalg.MATMUL_NT, ((m, k), (n, k)), dtype, {})]
    for form in forms:
        got = form(x, w)
        assert got.shape == (m, n) and got.dtype == dtype and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 10)


def test_compiled_plans_call_takes_a_transposed_view_rows_first(openblas, blas_only, monkeypatch):
    """backends' matmul_for (a compiled plan's 2-D product): where the rule takes the
    shapes, a transposed `b` runs as (w @ x.T).T, a row-major one on the choice's site."""
    from tracejit.compiler import backends
    from tracejit.compiler.cpu.gemm import blas_gemm
    seen = []
    real = blas_gemm.matmul

    def spy(a, b, *args, **kwargs):
        seen.append((a.shape, b.shape))
        return real(a, b, *args, **kwargs)
    monkeypatch.setattr(blas_gemm, "matmul", spy)
    rng = np.random.default_rng(4)
    g = rng.standard_normal((64, 2048)).astype(np.float32)
    cols = rng.standard_normal((289, 2048)).astype(np.float32)
    installed = {}
    fn = backends.get("cpu").matmul_for((64, 2048), (2048, 289), np.float32,
                                        lambda f: installed.__setitem__("f", f))
    got = fn(g, cols.T)
    assert seen[-1] == ((289, 2048), (2048, 64))       # rows first: cols @ g.T
    np.testing.assert_allclose(got, g @ cols.T, rtol=1e-4, atol=1e-3)
    assert got.flags.c_contiguous
    dense = np.ascontiguousarray(cols.T)
    np.testing.assert_allclose(fn(g, dense), g @ dense, rtol=1e-4, atol=1e-3)
