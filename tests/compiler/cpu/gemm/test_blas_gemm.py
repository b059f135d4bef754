"""The BLAS side of the products (tracejit/compiler/cpu/gemm/blas_gemm.py): `matmul` is numpy's
matmul on the policy's thread count (the machine's real load is never asserted on: the
count is faked), a batch of small products split by batch equals numpy's, and numpy's
cblas_?gemm found by symbol and called through ctypes as compiler/cpu/gemm/epilogue.py does:
C = A B^T + beta C equals numpy's."""
from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

from tracejit.compiler.cpu.gemm import blas_gemm
from tracejit.compiler.cpu.gemm.blas_gemm import gemm_address
from tracejit.compiler.cpu.runtime import coreshare
from tracejit.threads import blas_threads, set_blas_threads

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_unknown_dtype_has_no_gemm():
    assert gemm_address("int32") is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_found_gemm_computes_numpys_product(dtype):
    found = gemm_address(dtype)
    if found is None:
        pytest.skip("numpy's BLAS exports no cblas_?gemm this knows (not OpenBLAS or MKL)")
    addr, bits = found
    i = ctypes.c_int64 if bits == 64 else ctypes.c_int
    f = ctypes.c_float if dtype == "float32" else ctypes.c_double
    p = ctypes.c_void_p
    gemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, f, p, i, p, i,
                            f, p, i)(addr)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(dtype)
    w = rng.standard_normal((3, 7)).astype(dtype)        # used transposed: (7, 3)
    c = rng.standard_normal((5, 3)).astype(dtype)
    want = a @ w.T + 0.5 * c
    gemm(101, 111, 112, 5, 3, 7, 1.0, a.ctypes.data, 7, w.ctypes.data, 7, 0.5, c.ctypes.data, 3)
    np.testing.assert_allclose(c, want, rtol=1e-5 if dtype == "float32" else 1e-12)


@linux
def test_matmul_is_numpy_matmul_and_small_products_use_one_thread(monkeypatch):
    if blas_threads() is None:
        pytest.skip("numpy's BLAS is neither OpenBLAS nor MKL here")
    seen = []
    real = np.matmul

    def spy(a, b):
        seen.append(blas_threads())
        return real(a, b)
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(coreshare, "_local", type(coreshare._local)())
    monkeypatch.setattr(coreshare, "_blas", None)
    b0 = blas_threads()
    try:
        set_blas_threads(min(2, b0))
        rng = np.random.default_rng(0)
        # small (64x64x100: 0.4M) and tiny (8x5x3: BLAS keeps it on one thread by itself)
        a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 100), dtype=np.float32)
        c, d = rng.standard_normal((8, 5), dtype=np.float32), rng.standard_normal((5, 3), dtype=np.float32)
        monkeypatch.setattr(np, "matmul", spy)
        out, tiny = blas_gemm.matmul(a, b), blas_gemm.matmul(c, d)
        monkeypatch.setattr(np, "matmul", real)
        np.testing.assert_array_equal(out, real(a, b))
        np.testing.assert_array_equal(tiny, real(c, d))
        # the small product ran on one thread; the tiny one was left to BLAS (count untouched)
        assert seen == [1, min(2, b0)]
        assert blas_threads() == min(2, b0)       # and the count came back
    finally:
        set_blas_threads(b0)


@linux
def test_gemm_thread_count_and_ceiling_say_what_matmul_uses(monkeypatch, two_blas_threads):
    """What a profiler records beside a product's time: one thread for a small product while
    the policy holds several, BLAS's count otherwise; the ceiling is the count before adapt."""
    assert coreshare.blas_ceiling() == 2              # nothing adapted yet: BLAS's own count
    coreshare.adapt_blas()
    assert blas_gemm.gemm_thread_count(64, 1000, 10) == 1
    assert blas_gemm.gemm_thread_count(8, 5, 3) == 1      # tiny: BLAS's own choice, one
    assert blas_gemm.gemm_thread_count(256, 1024, 1024) == 2
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)
    coreshare.adapt_blas()                            # a core taken: one thread, ceiling kept
    assert blas_gemm.gemm_thread_count(256, 1024, 1024) == 1 and coreshare.blas_ceiling() == 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batched_products_split_by_batch_equal_numpy(dtype):
    """A batch of small products (split by its batch over the share pool: `_batched`) gives
    the products' values, whatever the batch's parts."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 128, 64)).astype(dtype)
    b = rng.standard_normal((6, 64, 128)).astype(dtype)
    assert blas_gemm._splits(a, b, 128 * 64 * 128)
    # (to rounding: OpenBLAS's threaded product of these shapes sums in another order than
    # its one-thread product, and how many threads a part or numpy's own call gets follows
    # the machine's load)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-11)
    want = np.einsum("bik,bkj->bij", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(blas_gemm._batched(a, b), want, **tol)
    np.testing.assert_allclose(blas_gemm.matmul(a, b), want, **tol)
