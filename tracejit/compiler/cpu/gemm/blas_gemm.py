"""numpy's own BLAS GEMM (``cblas_sgemm`` / ``cblas_dgemm``): its address, found by symbol.

Why: compiled plans run ``x @ w + b`` as one GEMM with beta=1 on an output filled with the
bias (compiler/cpu/gemm/epilogue.py), which numpy's matmul cannot express; the same library numpy
uses is called (through ctypes), so thread settings (tracejit.threads, coreshare) and
results are numpy's. The library is the one numpy loaded: the OpenBLAS numpy wheels ship
(``scipy_cblas_sgemm64_``), a system OpenBLAS, or MKL. (The recurrent kernels run their
per-step products on packed weights instead: compiler/cpu/gemm/template_panels.py.) `GEMM_SOURCE` is the
numba text a kernel module includes to call it:
attention's backward (ops/attention_prim.py) runs a whole part of its batch as one nogil
call, so two threads do not wait for each other's GIL between the products.
"""
from __future__ import annotations

__all__ = ["gemm_address", "GEMM_SOURCE"]

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

    from ....threads import _mapped_libraries
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


# ``gemm(fn, trans_a, m, n, k, a, lda, b, ldb, c, ldc, beta)``: C = op(A) B + beta C, row-major,
# on the arrays' data pointers (the caller passes arrays that start where the matrices start:
# slices, not offsets), ``fn`` the address from `gemm_address` passed to the kernel as an
# integer (so the compiled code holds no address and stays valid in the disk cache across
# processes). Integers are cast to the library's width; format with t (dtype) and bits.
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
