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


@pytest.mark.parametrize("m,k,n,dtype,want", [
    (5, 128, 384, np.float32, True), (2, 64, 1024, np.float32, True), (32, 256, 512, np.float32, True),
    (8, 768, 3072, np.float32, True),      # float32: no bound on the size
    (1, 128, 2048, np.float32, False),     # one row: BLAS's matrix-vector product
    (33, 128, 384, np.float32, False),     # the copies cost more than the route saves
    (5, 16, 512, np.float32, False),       # a shallow inner dim: the small kernel takes it
    (5, 128, 240, np.float32, False),      # an output of 1200 elements: the small kernel too
    (5, 128, 384, np.float64, True), (8, 768, 3072, np.float64, False),
    (5, 128, 384, np.int64, False)])
def test_few_rows_nt_rule(openblas, m, k, n, dtype, want):
    assert products.few_rows_nt(m, k, n, dtype) is want


def test_another_blas_keeps_the_transposed_product(monkeypatch):
    monkeypatch.setattr(products, "_blas_name", [False])
    assert not products.few_rows_nt(5, 128, 384, np.float32)


@pytest.mark.parametrize("m,k,n", [(5, 128, 384), (16, 256, 1100)])   # (BLAS's route, beyond tiny)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plan_calls_give_numpys_product(openblas, m, k, n, dtype):
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
