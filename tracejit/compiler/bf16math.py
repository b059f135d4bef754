"""bf16 load and store in generated kernels: the two conversions, as LLVM intrinsics.

A kernel keeps bf16 operands and outputs as uint16 arrays (their storage type,
`emitter.NUMBA_TYPE`) and computes in float32: the IR's casts to and from bf16 render
as these calls (`Emitter.cast`), which are register operations (a shift, a bit cast,
the round-to-nearest-even add) and vectorize with the loop around them. Same bits as
tracejit/bf16.py's numpy forms, NaN included.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["bf16_to_f32", "f32_to_bf16"]

_I16, _I32 = ir.IntType(16), ir.IntType(32)


@intrinsic
def bf16_to_f32(typingctx, x):
    """uint16 bf16 word -> float32 (exact)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        if x.bitwidth != 16:
            v = builder.trunc(v, _I16) if x.bitwidth > 16 else builder.zext(v, _I16)
        w = builder.shl(builder.zext(v, _I32), ir.Constant(_I32, 16))
        return builder.bitcast(w, ir.FloatType())
    return types.float32(x), codegen


@intrinsic
def f32_to_bf16(typingctx, x):
    """float32 -> uint16 bf16 word, rounded to nearest even; NaN stays a quiet NaN."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        f = args[0]
        u = builder.bitcast(f, _I32)
        c16 = ir.Constant(_I32, 16)
        odd = builder.and_(builder.lshr(u, c16), ir.Constant(_I32, 1))
        rounded = builder.add(builder.add(u, ir.Constant(_I32, 0x7FFF)), odd)
        quiet = builder.or_(u, ir.Constant(_I32, 0x400000))
        isnan = builder.fcmp_unordered("uno", f, f)
        # (one shift after the select: a scalar loop, as a pooling window's, runs 1.25x faster)
        return builder.trunc(builder.lshr(builder.select(isnan, quiet, rounded), c16), _I16)
    return types.uint16(x), codegen
