"""Intrinsics for code that C threads run holding no Python object: ``as_voidptr`` (an
int64 address as a numba ``void*``, for ``carray`` in the GIL-free share entries of
generated kernels: compiler/cshares.py, ops/halves.py) and ``call_sgemm`` / ``call_dgemm``
(a cblas GEMM called by address on int64 addresses: ops/halves.py's product pairs). A
module of its own: it imports numba, which code generation must not need."""
from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["as_voidptr", "call_sgemm", "call_dgemm"]


@intrinsic
def as_voidptr(typingctx, addr):
    """An int64 address as a ``void*``."""
    sig = types.voidptr(addr)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
    return sig, codegen


def _gemm_call(double: bool):
    """The intrinsic ``call(fn, order, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)``:
    ``C = op(A) op(B)`` (alpha 1, beta 0) by the cblas_?gemm of 64-bit integers (an ILP64
    OpenBLAS, numpy's wheels') at address `fn`; every argument an int64, a, b and c the
    matrices' addresses. (ops/blas_gemm.py's GEMM_SOURCE takes arrays and a library's
    integer width; a share entry has addresses only.)"""
    def call(typingctx, fn, order, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
        sig = types.void(fn, order, ta, tb, m, n, k, a, lda, b, ldb, c, ldc)

        def codegen(context, builder, signature, args):
            from llvmlite import ir
            i32, i64 = ir.IntType(32), ir.IntType(64)
            ft = ir.DoubleType() if double else ir.FloatType()
            fp = ft.as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, ft, fp, i64, fp, i64,
                                                   ft, fp, i64])
            f = builder.inttoptr(args[0], fnty.as_pointer())
            order_, ta_, tb_ = (builder.trunc(x, i32) for x in args[1:4])
            m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args[4:]
            builder.call(f, [order_, ta_, tb_, m_, n_, k_, ir.Constant(ft, 1.0), builder.inttoptr(a_, fp),
                             lda_, builder.inttoptr(b_, fp), ldb_, ir.Constant(ft, 0.0),
                             builder.inttoptr(c_, fp), ldc_])
            return context.get_dummy_value()
        return sig, codegen
    call.__name__ = call.__qualname__ = "call_dgemm" if double else "call_sgemm"
    return intrinsic(call)


call_sgemm = _gemm_call(False)
call_dgemm = _gemm_call(True)
