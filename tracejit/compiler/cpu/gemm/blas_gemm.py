"""The BLAS side of every CPU matrix product: numpy's matmul on the thread policy's count,
and numpy's own BLAS GEMM (``cblas_sgemm`` / ``cblas_dgemm``) by address.

`matmul` is what the GEMM choice measures the template against and runs wherever BLAS
wins: numpy's matmul on the BLAS threads the load policy gives now, a batch of small
products split by its batch over the share pool (`_batched`). `gemm_address` gives the
GEMM of the library numpy loaded (OpenBLAS or MKL), for ``x @ w + b`` as one GEMM with
beta=1 and for kernels that call it without the GIL (`GEMM_SOURCE`); thread settings and
results are numpy's.
"""
from __future__ import annotations

import numpy as np

from ..runtime import coreshare
from ..runtime import sharepool as _sharepool

__all__ = ["matmul", "gemm_thread_count", "gemm_address", "GEMM_SOURCE", "BATCH_SPLIT_MAX_MNK"]

# Products of m*k*n from which a batch of them stays on BLAS's own threads (each product
# big enough for its threads to pay) rather than being split by batch (`_batched`).
BATCH_SPLIT_MAX_MNK = 1 << 22


def matmul(a: np.ndarray, b: np.ndarray, blas_only: bool = False) -> np.ndarray:
    """``numpy.matmul(a, b)`` on the BLAS threads `coreshare.adapt` gives now. ``blas_only``:
    adapt BLAS's count only (eager matmul must not start numba's threads). A product below
    `coreshare.TINY_GEMM_MNK` skips the adaptation: BLAS keeps it on one thread anyway."""
    if a.ndim >= 2 and b.ndim >= 2:
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        mnk = m * k * n
        if mnk < coreshare.TINY_GEMM_MNK:
            return np.matmul(a, b)
        threads = coreshare.adapt_blas() if blas_only else coreshare.adapt()
        if a.ndim >= 3 and _splits(a, b, mnk):
            return _batched(a, b)
        if threads and coreshare.set_to_one(m, k, n):
            coreshare.blas_count_one()
            try:
                return np.matmul(a, b)
            finally:
                coreshare.blas_count_back()
        out = np.matmul(a, b)
        if threads != 1:
            _sharepool.worked()   # (BLAS's worker took a share: sharepool.warm)
        return out
    coreshare.adapt_blas() if blas_only else coreshare.adapt()   # a vector operand: its count as it is
    return np.matmul(a, b)


def _splits(a, b, mnk: int) -> bool:
    """Whether a batched product (same leading dims, float, each product small) runs split
    by batch over the cores (`_batched`) instead of numpy's one product at a time."""
    return (a.ndim == b.ndim and a.shape[0] > 1 and mnk < BATCH_SPLIT_MAX_MNK
            and a.shape[:-2] == b.shape[:-2] and a.dtype == b.dtype and a.dtype.kind == "f"
            and a.dtype.itemsize in (4, 8))


def _batched(a, b):
    """``a @ b`` for a batch of products each too small for BLAS's threads to pay: split
    over the pool's threads by its first axis, each part on one BLAS thread."""
    from ..runtime import sharepool
    out = np.empty(a.shape[:-1] + (b.shape[-1],), a.dtype)

    def part(lo, hi):
        np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi])
    sharepool.split(part, a.shape[0], out.size * a.shape[-1])
    return out


def gemm_thread_count(m: int, k: int, n: int) -> int | None:
    """The BLAS threads `matmul` gives an (m, k) @ (k, n) product now (for profiles); None
    where no known BLAS is loaded."""
    if coreshare.one_thread_now(m, k, n):
        return 1
    from ....threads import blas_threads
    return blas_threads()

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

    import numpy  # noqa: F401  (loads its BLAS)
    from ....threads import _find_blas_function
    bits = dict(_SYMBOLS[dtype])
    _, fn = _find_blas_function({"openblas": tuple(bits), "mkl_rt": tuple(bits)})
    return None if fn is None else (ctypes.cast(fn, ctypes.c_void_p).value, bits[fn.__name__])


# ``gemm(fn, trans_a, m, n, k, a, lda, b, ldb, c, ldc, beta)``: C = op(A) B + beta C, row-major,
# on the arrays' data pointers; ``fn`` the address from `gemm_address` passed as an integer
# (so the compiled code stays valid in the disk cache across processes).
GEMM_SOURCE = '''
from numba import types as _nbt
from numba.extending import intrinsic as _intrinsic
from llvmlite import ir as _ir


@_intrinsic
def gemm(typingctx, fn, trans_a, m, n, k, a, lda, b, ldb, c, ldc, beta):
    sig = _nbt.void(fn, trans_a, m, n, k, a, lda, b, ldb, c, ldc, beta)

    def codegen(context, builder, sig, args):
        i32, iw = _ir.IntType(32), _ir.IntType({bits})
        ft = _ir.FloatType() if "{t}" == "float32" else _ir.DoubleType()
        fp = _ir.PointerType(ft)
        fnty = _ir.FunctionType(_ir.VoidType(), [i32, i32, i32, iw, iw, iw, ft, fp, iw, fp, iw, ft, fp, iw])
        tys = sig.args

        def ptr(i):
            arr = context.make_array(tys[i])(context, builder, args[i])
            return builder.bitcast(arr.data, fp)

        def idx(i):
            return context.cast(builder, args[i], tys[i], _nbt.int{bits})

        ta = builder.select(context.cast(builder, args[1], tys[1], _nbt.boolean),
                            _ir.Constant(i32, 112), _ir.Constant(i32, 111))   # CblasTrans / NoTrans
        beta_ = context.cast(builder, args[11], tys[11], _nbt.{t})
        f = builder.inttoptr(context.cast(builder, args[0], tys[0], _nbt.intp), fnty.as_pointer())
        builder.call(f, [_ir.Constant(i32, 101), ta, _ir.Constant(i32, 111), idx(2), idx(3), idx(4),
                         _ir.Constant(ft, 1.0), ptr(5), idx(6), ptr(7), idx(8), beta_, ptr(9), idx(10)])
        return context.get_dummy_value()
    return sig, codegen
'''
