"""numpy's BLAS GEMM called from numba code (tracejit/ops/blas_gemm.py): the address is found for
the BLAS numpy loaded, and ``gemm`` computes numpy's products (both operand orders, beta 0
and 1, leading dimensions larger than the rows, the library's integer width)."""
import numpy as np
import pytest

from tracejit.ops import blas_gemm

pytest.importorskip("numba", reason="gemm is called from numba code")

_HARNESS = '''
from numba import njit


@njit
def product(fn, trans_a, m, n, k, a, b, c, beta):
    # c[:m, :n] = op(a) b + beta c on the top-left blocks of the row-major arrays
    gemm(fn, trans_a, m, n, k, a, a.shape[1], b, b.shape[1], c, c.shape[1], beta)
'''


@pytest.fixture(scope="module")
def gemms():
    found = {}
    for dtype in ("float32", "float64"):
        addr = blas_gemm.gemm_address(dtype)
        if addr is None:
            pytest.skip("numpy's BLAS exports no cblas GEMM that ops/blas_gemm.py knows")
        ns: dict = {}
        src = blas_gemm.GEMM_SOURCE.replace("{t}", dtype).replace("{bits}", str(addr[1])) + _HARNESS
        exec(compile(src, f"<gemm {dtype}>", "exec"), ns)
        found[dtype] = (ns["product"], addr[0])
    return found


def test_address_is_stable_and_unknown_dtypes_have_none():
    assert blas_gemm.gemm_address("float32") == blas_gemm.gemm_address("float32")
    assert blas_gemm.gemm_address("float16") is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_matches_numpy(gemms, dtype, trans_a, beta):
    product, fn = gemms[dtype]
    r = np.random.default_rng(3)
    m, n, k = 7, 5, 11
    a = r.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = r.standard_normal((k, n)).astype(dtype)
    c = r.standard_normal((m, n)).astype(dtype)
    want = (a.T if trans_a else a) @ b + beta * c
    product(fn, trans_a, m, n, k, a, b, c, beta)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


def test_gemm_takes_leading_dimensions(gemms):
    """A block of a wider array: the rows are the leading dimension apart (the layer kernels
    multiply into slices of larger buffers)."""
    product, fn = gemms["float64"]
    r = np.random.default_rng(4)
    a, b = r.standard_normal((3, 4)), r.standard_normal((4, 2))
    c = np.full((3, 6), 7.0)
    product(fn, False, 3, 2, 4, a, b, c, 0.0)     # c's rows are 6 apart
    np.testing.assert_allclose(c[:, :2], a @ b, rtol=1e-12)
    np.testing.assert_array_equal(c[:, 2:], 7.0)
