"""numpy's cblas_?gemm found by symbol (tracejit/compiler/cpu/gemm/blas_gemm.py) and called through
ctypes as compiler/cpu/gemm/epilogue.py does: C = A B^T + beta C equals numpy's."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tracejit.compiler.cpu.gemm.blas_gemm import gemm_address


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
