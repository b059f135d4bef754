"""Building blocks of the kernel math functions (mathlib.py and its parts): the numba
options they compile with (`_JIT`), the LLVM intrinsics they use (free bit casts, C ``pow``
without numba's checks, `_always_inline`) and shared constants. Generated kernels call
only `_always_inline` (through mathlib).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# Every function also calls ``_always_inline()`` so that LLVM inlines it into the caller's
# loop with these flags kept (numba-IR inlining would re-lower it with the caller's).
_JIT = dict(cache=False, nogil=True, error_model="numpy", fastmath={"contract"})

F = np.float32
D = np.float64


# --------------------------------------------------------------------------
# Bit casts (vectorize to nothing: they are register reinterpretations).

def _float_bits(ft, it):
    """float type `ft` -> its bit pattern as integer type `it` (of the same width)."""
    @intrinsic
    def cast(typingctx, x):
        if x != ft:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(it.bitwidth))
        return it(ft), codegen
    return cast


def _bits_float(ft, llvm_float):
    """Any integer (its low bits taken, or sign-extended to the width of float type `ft`)
    -> the `ft` float with that bit pattern."""
    @intrinsic
    def cast(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v, width = args[0], ft.bitwidth
            if x.bitwidth > width:
                v = builder.trunc(v, ir.IntType(width))
            elif x.bitwidth < width:
                v = builder.sext(v, ir.IntType(width))
            return builder.bitcast(v, llvm_float)
        return ft(x), codegen
    return cast


_f2i, _d2i = _float_bits(types.float32, types.int32), _float_bits(types.float64, types.int64)
_i2f, _i2d = _bits_float(types.float32, ir.FloatType()), _bits_float(types.float64, ir.DoubleType())


@intrinsic
def _libm_pow_f64(typingctx, x, y):
    """C pow() semantics (llvm.pow -> libm), without numba's Python checks."""
    if x != types.float64 or y != types.float64:
        return None

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType(), ir.DoubleType()])
        fn = builder.module.declare_intrinsic("llvm.pow", [ir.DoubleType()], fnty)
        return builder.call(fn, args)
    return types.float64(types.float64, types.float64), codegen


@intrinsic
def _always_inline(typingctx):
    """Mark the numba function that calls this as LLVM ``alwaysinline``: the bigger ones
    exceed LLVM's threshold, and a call left in a loop blocks its vectorization."""
    def codegen(context, builder, sig, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()
    return types.none(), codegen


# Constants shared by several modules; float32 ones are np.float32 globals, which numba
# freezes as float32 constants.

_INF32 = F(np.inf)
_NAN32 = F(np.nan)
_ZERO32 = F(0.0)
_ONE32 = F(1.0)
_TWO32 = F(2.0)
_HALF32 = F(0.5)
_SHIFT32 = F(12582912.0)          # 1.5 * 2**23: x + SHIFT rounds x to an integer
_SHIFT32_BITS = 0x4B400000

_INF64 = np.inf
_NAN64 = np.nan
_SHIFT64 = 6755399441055744.0      # 1.5 * 2**52
_SHIFT64_BITS = 0x4338000000000000
_SQRTHALF64_BITS = 0x3FE6A09E667F3BCD
