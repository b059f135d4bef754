"""numpy's own BLAS GEMM (``cblas_sgemm`` / ``cblas_dgemm``): its address, found by symbol.

Why: compiled plans run ``x @ w + b`` as one GEMM with beta=1 on an output filled with the
bias (compiler/biasgemm.py), which numpy's matmul cannot express; the same library numpy
uses is called (through ctypes), so thread settings (tracejit.threads, coreshare) and
results are numpy's. The library is the one numpy loaded: the OpenBLAS numpy wheels ship
(``scipy_cblas_sgemm64_``), a system OpenBLAS, or MKL. (Session 13's recurrent kernels
called it from numba too; session 14's run their per-step products on packed weights,
ops/packed_gemm.py.)
"""
from __future__ import annotations

__all__ = ["gemm_address"]

# cblas_?gemm symbols by library name part, with their integer width (ILP64 builds suffix
# their symbols with 64_; MKL's cblas_ names are the LP64 interface).
_SYMBOLS = {
    "float32": (("scipy_cblas_sgemm64_", 64), ("cblas_sgemm64_", 64), ("scipy_cblas_sgemm", 32),
                ("cblas_sgemm", 32)),
    "float64": (("scipy_cblas_dgemm64_", 64), ("cblas_dgemm64_", 64), ("scipy_cblas_dgemm", 32),
                ("cblas_dgemm", 32)),
}
_found: dict = {}


def gemm_address(dtype: str):
    """(address, integer bits) of numpy's BLAS ``cblas_sgemm`` (float32) / ``cblas_dgemm``
    (float64), or None when numpy's BLAS is not one this knows (OpenBLAS, MKL) or the dtype
    has no GEMM here."""
    if dtype not in _SYMBOLS:
        return None
    if dtype not in _found:
        _found[dtype] = _lookup(dtype)
    return _found[dtype]


def _lookup(dtype: str):
    import ctypes
    import os

    from ..threads import _mapped_libraries
    import numpy  # noqa: F401  (loads its BLAS)
    for path in _mapped_libraries():
        base = os.path.basename(path).lower()
        if "openblas" not in base and "mkl_rt" not in base:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym, bits in _SYMBOLS[dtype]:
            fn = getattr(lib, sym, None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value, bits
    return None
