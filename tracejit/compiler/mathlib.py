"""Vectorizable scalar math functions for generated numba kernels.

Why this module exists
----------------------
numba lowers ``math.exp``/``math.tanh``/... to calls into the C library.
Without Intel SVML those calls are scalar, so a loop that contains one cannot
be vectorized: a GELU over 4M float32 takes ~60 ms with ``math.tanh`` but
~2 ms with the pure-arithmetic ``tanh_f32`` below.  A second trap is that
float literals in numba code are float64, so ``x * 0.5`` silently promotes a
float32 ``x`` to float64.  Every function here

* is written only with arithmetic, comparisons turned into selects, and
  integer bit manipulation on the float's bit pattern (no data-dependent
  early return, no table lookups, no libm calls), and is marked LLVM
  ``alwaysinline``, so it is inlined into the caller's loop, which LLVM then
  vectorizes (the tests check for a vectorized loop without calls in the
  LLVM IR of a kernel using each function);
* keeps float32 in float32 (all constants are typed module-level numpy
  scalars; the tests check the compiled signature and the LLVM IR);
  ``sin_f32``/``cos_f32``/``pow_f32`` are the deliberate exception: they
  compute internally in float64 and round once at the end;
* handles the whole domain with numpy's special values: +-inf, nan, +-0
  (sign kept where numpy keeps it), subnormal inputs and outputs, overflow to
  inf, underflow to 0.

How to use it (code generator)
------------------------------
``FUNCTIONS[(op, dtype)]`` is the numba dispatcher and ``function_name(op,
dtype)`` its global name in this module, e.g. ``'tanh_f32'``; a generated
kernel does ``from tracejit.compiler.mathlib import tanh_f32`` and calls
``tanh_f32(v)`` on a scalar of exactly that dtype (cast first: pass
``np.float32`` values to ``*_f32``).  ``pow_*`` takes two arguments ``(x, y)``,
everything else one.  The functions are compiled with
``error_model='numpy'`` and ``fastmath={'contract'}`` (FMA contraction only:
nan/inf semantics are untouched).  They are not numba-IR inlined
(``inline='never'``, the default) but carry the LLVM ``alwaysinline``
attribute (set by the ``_always_inline()`` intrinsic), so after linking LLVM
inlines them into the kernel *with their own instruction flags*, whatever
flags the kernel uses.  The calling kernel should use ``error_model='numpy'``
itself (the division checks of the 'python' model block vectorization of the
kernel's own code) and must not use the ``fastmath`` flags ``nnan``/``ninf``
if inf/nan are to survive its own arithmetic.  ``cache=True`` on the kernel
works, but numba does not notice when this file changes: key the kernel cache
on ``SOURCE_HASH``.  Arguments must already have the function's dtype (cast
with ``np.float32(...)`` in generated code); most ``*_f32`` functions refuse
a float64 argument at typing time.
Integer powers with constant exponents should still be emitted as
multiplications by the code generator; ``pow_*`` is the general ``x**y``.

Accuracy (measured)
-------------------
Errors are in ulps of the result's dtype, against a reference evaluated in
higher precision on the same inputs: numpy float64 (``np.exp`` etc. on the
float32 input cast up; libm ``erf`` for erf) for the float32 functions, and
numpy long double (x87 80-bit: ``expl``, ``log1pl``, ...) for the float64
ones.  The ulp is that of the reference (2**-149 / 2**-1074 in the subnormal
range); an inf result where the reference rounds to inf counts as exact.

* float32, unary functions: maximum over **all 2**32 float32 inputs**
  (exhaustive, including subnormals, +-inf and every nan).
* float32 pow: 6.4e7 random pairs (log-uniform |x| over the whole range and
  y in +-10, x in [0, 4] with y in +-200, x near 1 with y in +-2e4, negative
  x with integer y) plus the full special-value grid (exact numpy match).
* float64: ~4.2e7 points per function (log-uniform magnitudes of both signs
  from 1e-323 to 1.8e308, uniform on [-1, 1], [-40, 40], [-750, 750], near 1,
  near -1, around the overflow/underflow thresholds) plus special values.

==========  ====================  ====================  ======================
function    float32 max error     float64 max error     float64 rel. error
==========  ====================  ====================  ======================
exp         1.01 ulp              1.04 ulp              2.3e-16
expm1       1.45 ulp              1.85 ulp              4.1e-16
log         0.85 ulp              0.92 ulp              2.1e-16
log1p       1.44 ulp              1.48 ulp              3.3e-16
tanh        6.98 ulp              2.55 ulp              5.7e-16
sigmoid     2.41 ulp              2.33 ulp              5.2e-16
softplus    1.71 ulp              1.76 ulp              3.9e-16
erf         0.99 ulp (abs 6e-8)   libm ``math.erf``     (not vectorized)
sin         0.50 ulp (any x)      libm ``math.sin``     (not vectorized)
cos         0.50 ulp (any x)      libm ``math.cos``     (not vectorized)
pow         0.50 ulp              libm ``pow``          (not vectorized)
==========  ====================  ====================  ======================

For comparison numpy's own float32 ``np.sin``/``np.cos`` are off by up to
1.4 ulp and ``np.power`` by 0.52 ulp on the same samples.  1 float32 ulp is a
relative error of at most 1.19e-7, so every float32 function but tanh is within
3e-7 relative error (erf: absolute error below 6e-8; tanh: 4.2e-7, see below).  ``MAX_ULP`` holds these
bounds (rounded up) and the tests assert them on a dense sample.

``sigmoid(x) = 1/(1+exp(-x))`` (reference computed as ``exp(x)/(1+exp(x))``
for x<0 in float64), ``softplus(x) = log(1+exp(x))`` (reference
``np.logaddexp(0, x)``).  The float64 erf/sin/cos/pow call the C library
(correct and fully accurate, but scalar): a vectorizable float64 erf needs
several piecewise approximations, sin/cos need a 2**1024-range Payne-Hanek
reduction and pow a double-double log; not worth it for float64 which is
rarely the hot dtype here.

Algorithms (own implementations; coefficients are our own minimax fits made
with a Remez exchange in mpmath, then rounded to the working precision):

* exp: x = n*ln2 + r with a Cody-Waite split of ln2 (n from the 1.5*2**23
  "shifter" trick, no float->int conversion), exp(r) = 1 + r + r^2*P(r),
  scale by 2**n as two factors 2**(n//2) * 2**(n-n//2) so that subnormal
  results are rounded once and overflow gives inf.
* expm1: same reduction, expm1(r) = r + r^2/2 + r^3*Q(r),
  result = 2*(2**(n-1)*expm1(r) + (2**(n-1) - 1/2)).
* log: x = 2**k * m with m in [sqrt(1/2), sqrt(2)) by integer ops on the bit
  pattern (subnormals pre-scaled by 2**23/2**54), log1p(f), f = m-1:
  float32 f - f^2/2 + f^3*P(f); float64 f - s*(f - T(s^2)), s = f/(2+f).
* log1p: u = 1+x plus the exact rounding error c of that sum (Fast2Sum);
  log1p(x) = k*ln2 + log1p(f + c*2**-k).
* tanh (float32): x*P(x^2)/Q(x^2), degrees 5 and 3 in x^2, x clamped to
  +-9.0109138 (the smallest float32 whose tanh rounds to 1), P(0) = Q(0) = 1
  so tanh(x) = x exactly for tiny x, and the value at the clamp is exactly 1
  in float32.  The fit (a minimax in float32 ulps, Loeb's iteration over
  linear programs: ``tools/fit_tanh_f32.py``, which also runs the exhaustive
  check) is good to 1.9 ulp; rounding in the float32 evaluation of P and Q,
  whose values reach ~20 and ~150 while the result sits just below 1, brings
  the total to 7.0 ulp (relative error < 4.2e-7), and could lift the result
  an ulp above 1 for x in (7.9, 9.01): a final clamp keeps |tanh| <= 1.  We
  accept the error for speed: this is the function in every GELU and tanh
  layer, and the expm1-based version (2.5 ulp) left the 4M-element GELU
  kernel compute-bound at 1.45x this one's time.
* tanh (float64): t = expm1(-2|x|) (|x| clamped to 20), tanh = -t/(t+2)
  with the sign of x; no cancellation anywhere and tanh(x)=x for tiny x.
* sigmoid: e = exp(-|x|), (1 or e)/(1+e), so both tails are accurate
  (including the subnormal range for x < -87).
* softplus: max(x,0) + log1p(exp(-|x|)).
* erf (float32): |x| < 1: x + x*P(x^2); 1 <= |x| < 4: 1 - exp(-x^2)*Q(|x|-1);
  clamped at 4 where erf rounds to 1.
* sin/cos (float32, float64 internally): exact Payne-Hanek reduction with
  integer arithmetic for every |x| >= pi/4 (x*2/pi mod 4 from a 96-bit window
  of 2/pi selected by the exponent, 24x32-bit products only), so huge
  arguments are exact too; sin/cos(r) polynomials on [-pi/4, pi/4].
* pow (float32, float64 internally): exp2(y*log2|x|) with a log2 good to
  ~1e-13 and a 2**r polynomial, rounded once to float32; C99/numpy special
  cases (pow(x, 0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1, negative x with
  integer y gives the sign of y's parity, non-integer y gives nan, signed
  zeros and infinities).
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from ..ops._erf_coeffs import ERF32_BIG, ERF32_SMALL
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


# --------------------------------------------------------------------------
# Compilation options shared by every function of this module.  Every function
# also calls ``_always_inline()`` so that LLVM inlines it into the caller's
# loop after linking, with these flags kept on its instructions (numba-IR
# ``inline='always'`` would re-lower it with the *caller's* flags instead).
_JIT = dict(cache=False, nogil=True, error_model="numpy", fastmath={"contract"})

F = np.float32
D = np.float64


# --------------------------------------------------------------------------
# Bit casts (vectorize to nothing: they are register reinterpretations).

@intrinsic
def _f2i(typingctx, x):
    """float32 -> its int32 bit pattern."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


@intrinsic
def _i2f(typingctx, x):
    """Any integer (low 32 bits taken) -> float32 with that bit pattern."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        if x.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif x.bitwidth < 32:
            v = builder.sext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())
    return types.float32(x), codegen


@intrinsic
def _d2i(typingctx, x):
    """float64 -> its int64 bit pattern."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _i2d(typingctx, x):
    """Any integer (sign-extended to 64 bits) -> float64 with that bit pattern."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        if x.bitwidth < 64:
            v = builder.sext(v, ir.IntType(64))
        return builder.bitcast(v, ir.DoubleType())
    return types.float64(x), codegen


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
    """Mark the numba function that calls this as LLVM ``alwaysinline``.

    Called first in every function here: the bigger ones (sin/cos, softplus,
    pow) exceed LLVM's inlining threshold, and a call left in the caller's loop
    blocks its vectorization.  Unlike numba-IR ``inline='always'`` this keeps
    the function's own fastmath/error_model flags."""
    def codegen(context, builder, sig, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()
    return types.none(), codegen


# --------------------------------------------------------------------------
# Constants.  float32 ones are np.float32 globals: numba freezes them as
# float32 constants, so no float64 promotion can sneak in.

_INF32 = F(np.inf)
_NAN32 = F(np.nan)
_ZERO32 = F(0.0)
_ONE32 = F(1.0)
_TWO32 = F(2.0)
_HALF32 = F(0.5)
_SHIFT32 = F(12582912.0)          # 1.5 * 2**23: x + SHIFT rounds x to an integer
_SHIFT32_BITS = 0x4B400000
_LOG2E32 = F(1.4426950216293335)
_LN2HI32 = F(0.693359375)          # 9 significant bits: n*LN2HI is exact
_LN2LO32 = F(-0.00021219444170128554)
_MINNORM32 = F(1.1754943508222875e-38)
_TWO23_32 = F(8388608.0)
_SQRTHALF32_BITS = 0x3F3504F3

# exp(r) = 1 + r + r^2 * (E0 + E1 r + E2 r^2 + E3 r^3 + E4 r^4), |r| <= 0.35
_E32_0 = F(0.4999999403953552)
_E32_1 = F(0.16666515171527863)
_E32_2 = F(0.04166845604777336)
_E32_3 = F(0.008369410410523415)
_E32_4 = F(0.0013813157565891743)

# expm1(r) = r + r^2/2 + r^3 * (M0 + M1 r + M2 r^2 + M3 r^3 + M4 r^4)
_M32_0 = F(0.16666634380817413)
_M32_1 = F(0.041666507720947266)
_M32_2 = F(0.008341805078089237)
_M32_3 = F(0.0013931223656982183)
_M32_4 = F(0.00014905868738424033)

# log1p(f) = f - f^2/2 + f^3 * (L0 + L1 f + ... + L8 f^8), f in [-0.2929, 0.4143]
_L32_0 = F(0.3333330750465393)
_L32_1 = F(-0.2499997317790985)
_L32_2 = F(0.20002514123916626)
_L32_3 = F(-0.16670353710651398)
_L32_4 = F(0.1421337127685547)
_L32_5 = F(-0.12358846515417099)
_L32_6 = F(0.1188683956861496)
_L32_7 = F(-0.11963018029928207)
_L32_8 = F(0.07105211913585663)

# erf(x) = x + x * (A0 + A1 z + ... + A6 z^6), z = x^2, |x| < 1
# erfc(x) = exp(-x^2) * (B0 + B1 t + ... + B8 t^8), t = x - 1, 1 <= x <= 4
(_A32_0, _A32_1, _A32_2, _A32_3, _A32_4, _A32_5, _A32_6) = (F(c) for c in ERF32_SMALL)
(_B32_0, _B32_1, _B32_2, _B32_3, _B32_4, _B32_5, _B32_6, _B32_7, _B32_8) = (F(c) for c in ERF32_BIG)
_FOUR32 = F(4.0)
# tanh(x) = x * P(x^2) / Q(x^2) for |x| <= SAT (tools/fit_tanh_f32.py); P(0) = Q(0) = 1,
# SAT * P(SAT^2) / Q(SAT^2) = 1 (checked in float32 by the tests)
_TP32_1 = F(0.12929777801036835)
_TP32_2 = F(0.0029309915844351053)
_TP32_3 = F(9.338539712189231e-06)
_TP32_4 = F(-1.2912423130728712e-08)
_TP32_5 = F(1.840158407595549e-11)
_TQ32_1 = F(0.4626312851905823)
_TQ32_2 = F(0.023808080703020096)
_TQ32_3 = F(0.00022936340246815234)
_TANH_SAT32 = F(9.010913848876953)   # the smallest float32 whose tanh rounds to 1
_EXP_HI32 = F(89.0)                # exp(89) overflows; keeps n <= 128
_EXP_LO32 = F(-104.0)              # exp(-104) < 2**-150 rounds to 0
_EXPM1_LO32 = F(-20.0)             # expm1(-20) rounds to -1

# ---- float64 constants
_INF64 = np.inf
_NAN64 = np.nan
_SHIFT64 = 6755399441055744.0      # 1.5 * 2**52
_SHIFT64_BITS = 0x4338000000000000
_LOG2E64 = 1.4426950408889634
_LN2HI64 = 0.6931471805598903      # 42 significant bits
_LN2LO64 = 5.497923018708371e-14
_MINNORM64 = 2.2250738585072014e-308
_TWO54_64 = 18014398509481984.0
_SQRTHALF64_BITS = 0x3FE6A09E667F3BCD
_EXP_HI64 = 710.0
_EXP_LO64 = -746.0
_EXPM1_LO64 = -40.0

# exp(r) = 1 + r + r^2 * P(r), |r| <= 0.3466, P degree 9
_E64 = (0.5000000000000011, 0.16666666666666413, 0.04166666666653018,
        0.008333333333494434, 0.0013888888943622557, 0.0001984126950662004,
        2.4801493107607324e-05, 2.755758635430377e-06, 2.763024499984982e-07,
        2.5000062174103326e-08)
(_E64_0, _E64_1, _E64_2, _E64_3, _E64_4, _E64_5, _E64_6, _E64_7, _E64_8, _E64_9) = _E64
# expm1(r) = r + r^2/2 + r^3 * Q(r), Q degree 9
_M64 = (0.16666666666666677, 0.04166666666666671, 0.008333333333320387,
        0.0013888888888842629, 0.00019841269889632644, 2.480158743991157e-05,
        2.7557240378875232e-06, 2.7557150031928395e-07, 2.5110460340351502e-08,
        2.096023353159217e-09)
(_M64_0, _M64_1, _M64_2, _M64_3, _M64_4, _M64_5, _M64_6, _M64_7, _M64_8, _M64_9) = _M64
# 2*atanh(s) = 2s + s*T(z), z = s^2 <= 0.0295, T(z) = z*(T1 + T2 z + ... + T7 z^6)
(_T64_1, _T64_2, _T64_3, _T64_4, _T64_5, _T64_6, _T64_7) = (
    0.6666666666666735, 0.3999999999941109, 0.2857142874326281, 0.2222219847597695,
    0.18183569740149744, 0.1531390324036643, 0.14797507755000044)

# ---- float64-internal helpers for the float32 sin/cos/pow
# sin(r) = r + r^3 * S(r^2), cos(r) = 1 - r^2/2 + r^4 * C(r^2), |r| <= pi/4
(_S_0, _S_1, _S_2, _S_3) = (-0.1666666664079707, 0.008333329304844917,
                            -0.00019839312270061196, 2.718121632107742e-06)
(_C_0, _C_1, _C_2, _C_3) = (0.04166666661949219, -0.0013888883500143123,
                            2.4799460171404323e-05, -2.7205755541570015e-07)
_PIO2 = 1.5707963267948966
_PIO4_32 = F(0.7853981633974483)
# 2/pi bits, preceded by 32 zero bits: _PI_Dw = words w and w+1 of that bit string
_PI_D0 = 0x00000000517CC1B7
_PI_D1 = 0x517CC1B727220A94
_PI_D2 = 0x27220A94FE13ABE8
_PI_D3 = -0x01EC541705659120  # 0xFE13ABE8FA9A6EE0 as int64
_PI_D4 = -0x0565911F924EB534  # 0xFA9A6EE06DB14ACC as int64
_PI_D5 = 0x6DB14ACC9E21C820
_PI_D6 = -0x61DE37DF00D74E2B  # 0x9E21C820FF28B1D5 as int64
_MAGIC52 = 4503599627370496.0      # 2**52
_MAGIC52_BITS = 0x4330000000000000
# log2(m) = s * G(s^2), s = (m-1)/(m+1)
(_G_0, _G_1, _G_2, _G_3, _G_4, _G_5) = (2.885390081777849, 0.9617966941149139,
                                        0.577077941897019, 0.41220930076478995,
                                        0.31990366713347523, 0.28292979773348526)
# 2**r = 1 + r * H(r), |r| <= 1/2
(_H_0, _H_1, _H_2, _H_3, _H_4, _H_5, _H_6, _H_7) = (
    0.6931471805412326, 0.2402265069474257, 0.0555041095922913, 0.009618129558848679,
    0.0013333434157233104, 0.0001540309827749437, 1.5314209306734236e-05,
    1.3344185694310604e-06)
_P2M30 = 2.0 ** -30
_P2M62 = 2.0 ** -62
_P2M94 = 2.0 ** -94
_HALFMAGIC = 4503601774854144.0    # 2**52 + 2**31


# ==========================================================================
# float32
# ==========================================================================

@njit(**_JIT)
def _exp_core_f32(x):
    """exp(x) for x in [-104, 89] (nan propagates)."""
    _always_inline()
    t = x * _LOG2E32 + _SHIFT32
    n = t - _SHIFT32
    r = (x - n * _LN2HI32) - n * _LN2LO32
    p = _E32_0 + r * (_E32_1 + r * (_E32_2 + r * (_E32_3 + r * _E32_4)))
    p = _ONE32 + (r + (r * r) * p)
    ni = _f2i(t) - _SHIFT32_BITS
    n1 = ni >> 1
    n2 = ni - n1
    return (p * _i2f((n1 + 127) << 23)) * _i2f((n2 + 127) << 23)


@njit(**_JIT)
def exp_f32(x):
    _always_inline()
    xc = _EXP_HI32 if x > _EXP_HI32 else x
    xc = _EXP_LO32 if xc < _EXP_LO32 else xc
    return _exp_core_f32(xc)


@njit(**_JIT)
def _expm1_core_f32(x):
    """expm1(x) for x in [-20, 89] (nan propagates; -0 may come back as +0)."""
    _always_inline()
    t = x * _LOG2E32 + _SHIFT32
    n = t - _SHIFT32
    r = (x - n * _LN2HI32) - n * _LN2LO32
    q = _M32_0 + r * (_M32_1 + r * (_M32_2 + r * (_M32_3 + r * _M32_4)))
    p = r + (r * r) * (_HALF32 + r * q)
    sh = _i2f((_f2i(t) - _SHIFT32_BITS + 126) << 23)     # 2**(n-1)
    res = (sh * p + (sh - _HALF32)) * _TWO32
    return p if n == _ZERO32 else res


@njit(**_JIT)
def expm1_f32(x):
    _always_inline()
    xc = _EXP_HI32 if x > _EXP_HI32 else x
    xc = _EXPM1_LO32 if xc < _EXPM1_LO32 else xc
    res = _expm1_core_f32(xc)
    return x if x == _ZERO32 else res


@njit(**_JIT)
def _log_tail_f32(f, kf):
    """k*ln2 + log1p(f) for f in [-0.2929, 0.4143] (slightly beyond is fine)."""
    _always_inline()
    p = _L32_0 + f * (_L32_1 + f * (_L32_2 + f * (_L32_3 + f * (
        _L32_4 + f * (_L32_5 + f * (_L32_6 + f * (_L32_7 + f * _L32_8)))))))
    f2 = f * f
    return kf * _LN2HI32 + (f + (kf * _LN2LO32 + f2 * (f * p - _HALF32)))


@njit(**_JIT)
def log_f32(x):
    _always_inline()
    sub = x < _MINNORM32
    xs = x * _TWO23_32 if sub else x
    ib = _f2i(xs)
    k = (ib - _SQRTHALF32_BITS) >> 23
    f = _i2f(ib - (k << 23)) - _ONE32
    kf = _i2f(k + _SHIFT32_BITS) - _SHIFT32
    kf = kf - F(23.0) if sub else kf
    res = _log_tail_f32(f, kf)
    res = res if x < _INF32 else x
    special = -_INF32 if x == _ZERO32 else _NAN32
    return res if x > _ZERO32 else special


@njit(**_JIT)
def log1p_f32(x):
    _always_inline()
    u = _ONE32 + x
    # exact rounding error of u = 1 + x (Fast2Sum, larger operand first)
    c_big = _ONE32 - (u - x)
    c_small = x - (u - _ONE32)
    c = c_big if x > _ONE32 else c_small
    ib = _f2i(u)
    k = (ib - _SQRTHALF32_BITS) >> 23
    f = _i2f(ib - (k << 23)) - _ONE32
    ks = 127 - k
    ks = 0 if ks < 0 else ks                             # 2**-128 -> 0: c is negligible
    f = f + c * _i2f(ks << 23)                           # + c * 2**-k
    kf = _i2f(k + _SHIFT32_BITS) - _SHIFT32
    res = _log_tail_f32(f, kf)
    res = res if u < _INF32 else u
    special = -_INF32 if u == _ZERO32 else _NAN32
    res = res if u > _ZERO32 else special
    return x if x == _ZERO32 else res


@njit(**_JIT)
def tanh_f32(x):
    # A rational function of x^2 (as Eigen and XLA do) rather than one built on
    # expm1: no range reduction or bit manipulation, a third less arithmetic, so a
    # GELU kernel is memory-bound on two cores instead of compute-bound.
    _always_inline()
    xc = _TANH_SAT32 if x > _TANH_SAT32 else x
    xc = -_TANH_SAT32 if xc < -_TANH_SAT32 else xc      # nan falls through both
    t = xc * xc
    p = _ONE32 + t * (_TP32_1 + t * (_TP32_2 + t * (_TP32_3 + t * (_TP32_4 + t * _TP32_5))))
    q = _ONE32 + t * (_TQ32_1 + t * (_TQ32_2 + t * _TQ32_3))
    r = xc * p / q                                      # exactly +-1 at +-SAT
    # rounding in P and Q can put r a couple of ulps above 1 for x in (7.9, SAT);
    # |tanh| <= 1 is kept exactly (nan falls through both)
    r = _ONE32 if r > _ONE32 else r
    return -_ONE32 if r < -_ONE32 else r


@njit(**_JIT)
def sigmoid_f32(x):
    _always_inline()
    y = -abs(x)
    y = _EXP_LO32 if y < _EXP_LO32 else y
    e = _exp_core_f32(y)                                  # in [0, 1]
    num = _ONE32 if x >= _ZERO32 else e
    return num / (_ONE32 + e)


@njit(**_JIT)
def softplus_f32(x):
    _always_inline()
    y = -abs(x)
    y = _EXP_LO32 if y < _EXP_LO32 else y
    e = _exp_core_f32(y)                                  # in [0, 1]
    m = x if x > _ZERO32 else _ZERO32
    return m + log1p_f32(e)


@njit(**_JIT)
def erf_f32(x):
    _always_inline()
    a = abs(x)
    a = _FOUR32 if a > _FOUR32 else a
    z = a * a
    ps = _A32_0 + z * (_A32_1 + z * (_A32_2 + z * (_A32_3 + z * (
        _A32_4 + z * (_A32_5 + z * _A32_6)))))
    small = a + a * ps
    t = a - _ONE32
    q = _B32_0 + t * (_B32_1 + t * (_B32_2 + t * (_B32_3 + t * (
        _B32_4 + t * (_B32_5 + t * (_B32_6 + t * (_B32_7 + t * _B32_8)))))))
    big = _ONE32 - _exp_core_f32(-z) * q
    r = small if a < _ONE32 else big
    return math.copysign(r, x)


@njit(**_JIT)
def _rem_pio2_f32(ax):
    """For a float32 ax >= pi/4 (finite): (f, q) with ax*2/pi = q + f (mod 4),
    q in 0..3, f in [-1/2, 1/2) as float64, computed exactly (Payne-Hanek with
    a 96-bit window of 2/pi).  Other inputs give garbage, never UB."""
    _always_inline()
    ib = np.int64(_f2i(ax))
    be = (ib >> 23) & 0xFF
    be = 126 if be < 126 else be
    be = 254 if be > 254 else be
    m = (ib & 0x7FFFFF) | 0x800000
    ps = be - 119                     # first window bit (table has 32 leading zeros)
    j = ps >> 5
    sh = 32 - (ps & 31)
    # table words j, j+1, j+2 picked with and/or masks: a select chain would be
    # turned into a switch lookup table by LLVM, which blocks vectorization
    m0 = -np.int64(j == 0)
    m1 = -np.int64(j == 1)
    m2 = -np.int64(j == 2)
    m3 = -np.int64(j == 3)
    m4 = -np.int64(j == 4)
    d0 = ((_PI_D0 & m0) | (_PI_D1 & m1) | (_PI_D2 & m2) | (_PI_D3 & m3) | (_PI_D4 & m4))
    d1 = ((_PI_D1 & m0) | (_PI_D2 & m1) | (_PI_D3 & m2) | (_PI_D4 & m3) | (_PI_D5 & m4))
    d2 = ((_PI_D2 & m0) | (_PI_D3 & m1) | (_PI_D4 & m2) | (_PI_D5 & m3) | (_PI_D6 & m4))
    w0 = (d0 >> sh) & 0xFFFFFFFF
    w1 = (d1 >> sh) & 0xFFFFFFFF
    w2 = (d2 >> sh) & 0xFFFFFFFF
    p0 = m * w0
    p1 = m * w1
    p2 = m * w2
    hi = (p0 << 32) + p1 + (p2 >> 32)        # bits of (x*2/pi mod 4) * 2**62 (mod 2**64)
    lo = p2 & 0xFFFFFFFF                       # next 32 bits
    q = ((hi + (1 << 61)) >> 62) & 3
    fr = hi - (q << 62)                        # signed, in [-2**61, 2**61)
    frh = (fr >> 32) + 0x80000000
    frl = fr & 0xFFFFFFFF
    f = ((_i2d(frh | _MAGIC52_BITS) - _HALFMAGIC) * _P2M30
         + (_i2d(frl | _MAGIC52_BITS) - _MAGIC52) * _P2M62) \
        + (_i2d(lo | _MAGIC52_BITS) - _MAGIC52) * _P2M94
    return f, q


@njit(**_JIT)
def _sin_poly(r):
    _always_inline()
    z = r * r
    return r + (r * z) * (_S_0 + z * (_S_1 + z * (_S_2 + z * _S_3)))


@njit(**_JIT)
def _cos_poly(r):
    _always_inline()
    z = r * r
    return (1.0 - 0.5 * z) + (z * z) * (_C_0 + z * (_C_1 + z * (_C_2 + z * _C_3)))


@njit(**_JIT)
def sin_f32(x):
    _always_inline()
    ax = abs(x)
    f, q = _rem_pio2_f32(ax)
    small = ax < _PIO4_32
    r = D(ax) if small else f * _PIO2
    q = 0 if small else q
    s = _sin_poly(r)
    c = _cos_poly(r)
    v = c if (q & 1) == 1 else s
    v = -v if (q & 2) == 2 else v
    res = F(v) * math.copysign(_ONE32, x)
    return res if ax < _INF32 else x - x


@njit(**_JIT)
def cos_f32(x):
    _always_inline()
    ax = abs(x)
    f, q = _rem_pio2_f32(ax)
    small = ax < _PIO4_32
    r = D(ax) if small else f * _PIO2
    q = 1 if small else q + 1
    s = _sin_poly(r)
    c = _cos_poly(r)
    v = c if (q & 1) == 1 else s
    v = -v if (q & 2) == 2 else v
    res = F(v)
    return res if ax < _INF32 else x - x


@njit(**_JIT)
def pow_f32(x, y):
    _always_inline()
    xd = D(x)
    yd = D(y)
    ax = abs(xd)
    # log2|x| in float64 (|x| is a normal float64, or 0 / inf / nan)
    ib = _d2i(ax)
    k = (ib - _SQRTHALF64_BITS) >> 52
    m = _i2d(ib - (k << 52))
    kf = _i2d(k + _SHIFT64_BITS) - _SHIFT64
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    l2 = kf + s * (_G_0 + z * (_G_1 + z * (_G_2 + z * (_G_3 + z * (_G_4 + z * _G_5)))))
    l2 = l2 if ax < _INF64 else ax
    l2 = -_INF64 if ax == 0.0 else l2
    e = yd * l2
    e = 130.0 if e > 130.0 else e
    e = -160.0 if e < -160.0 else e
    t = e + _SHIFT64
    n = t - _SHIFT64
    r = e - n
    p = 1.0 + r * (_H_0 + r * (_H_1 + r * (_H_2 + r * (_H_3 + r * (
        _H_4 + r * (_H_5 + r * (_H_6 + r * _H_7)))))))
    res = p * _i2d((_d2i(t) - _SHIFT64_BITS + 1023) << 52)
    # signs and C99 / numpy special cases
    fy = np.floor(yd)
    yint = fy == yd
    yh = 0.5 * yd
    yodd = (yh - np.floor(yh)) == 0.5
    xneg = math.copysign(1.0, xd) < 0.0
    res = -res if (xneg and yodd) else res
    res = _NAN64 if (xd < 0.0 and ax < _INF64 and not yint) else res
    res = 1.0 if (yd == 0.0 or xd == 1.0) else res
    res = 1.0 if (xd == -1.0 and abs(yd) == _INF64) else res
    return F(res)


# ==========================================================================
# float64
# ==========================================================================

@njit(**_JIT)
def _exp_core_f64(x):
    """exp(x) for x in [-746, 710] (nan propagates)."""
    _always_inline()
    t = x * _LOG2E64 + _SHIFT64
    n = t - _SHIFT64
    r = (x - n * _LN2HI64) - n * _LN2LO64
    p = _E64_0 + r * (_E64_1 + r * (_E64_2 + r * (_E64_3 + r * (_E64_4 + r * (
        _E64_5 + r * (_E64_6 + r * (_E64_7 + r * (_E64_8 + r * _E64_9))))))))
    p = 1.0 + (r + (r * r) * p)
    ni = _d2i(t) - _SHIFT64_BITS
    n1 = ni >> 1
    n2 = ni - n1
    return (p * _i2d((n1 + 1023) << 52)) * _i2d((n2 + 1023) << 52)


@njit(**_JIT)
def exp_f64(x):
    _always_inline()
    xc = _EXP_HI64 if x > _EXP_HI64 else x
    xc = _EXP_LO64 if xc < _EXP_LO64 else xc
    return _exp_core_f64(xc)


@njit(**_JIT)
def _expm1_core_f64(x):
    """expm1(x) for x in [-40, 710] (nan propagates; -0 may come back as +0)."""
    _always_inline()
    t = x * _LOG2E64 + _SHIFT64
    n = t - _SHIFT64
    r = (x - n * _LN2HI64) - n * _LN2LO64
    q = _M64_0 + r * (_M64_1 + r * (_M64_2 + r * (_M64_3 + r * (_M64_4 + r * (
        _M64_5 + r * (_M64_6 + r * (_M64_7 + r * (_M64_8 + r * _M64_9))))))))
    p = r + (r * r) * (0.5 + r * q)
    sh = _i2d((_d2i(t) - _SHIFT64_BITS + 1022) << 52)   # 2**(n-1)
    res = (sh * p + (sh - 0.5)) * 2.0
    return p if n == 0.0 else res


@njit(**_JIT)
def expm1_f64(x):
    _always_inline()
    xc = _EXP_HI64 if x > _EXP_HI64 else x
    xc = _EXPM1_LO64 if xc < _EXPM1_LO64 else xc
    res = _expm1_core_f64(xc)
    return x if x == 0.0 else res


@njit(**_JIT)
def _log_tail_f64(f, kf):
    """k*ln2 + log1p(f) for f in [-0.2929, 0.4143] (slightly beyond is fine)."""
    _always_inline()
    s = f / (2.0 + f)
    z = s * s
    tz = z * (_T64_1 + z * (_T64_2 + z * (_T64_3 + z * (_T64_4 + z * (
        _T64_5 + z * (_T64_6 + z * _T64_7))))))
    # log1p(f) = 2s + s*T = f - s*(f - T)
    return kf * _LN2HI64 + (f - (s * (f - tz) - kf * _LN2LO64))


@njit(**_JIT)
def log_f64(x):
    _always_inline()
    sub = x < _MINNORM64
    xs = x * _TWO54_64 if sub else x
    ib = _d2i(xs)
    k = (ib - _SQRTHALF64_BITS) >> 52
    f = _i2d(ib - (k << 52)) - 1.0
    kf = _i2d(k + _SHIFT64_BITS) - _SHIFT64
    kf = kf - 54.0 if sub else kf
    res = _log_tail_f64(f, kf)
    res = res if x < _INF64 else x
    special = -_INF64 if x == 0.0 else _NAN64
    return res if x > 0.0 else special


@njit(**_JIT)
def log1p_f64(x):
    _always_inline()
    u = 1.0 + x
    c_big = 1.0 - (u - x)
    c_small = x - (u - 1.0)
    c = c_big if x > 1.0 else c_small
    ib = _d2i(u)
    k = (ib - _SQRTHALF64_BITS) >> 52
    f = _i2d(ib - (k << 52)) - 1.0
    ks = 1023 - k
    ks = 0 if ks < 0 else ks                             # 2**-1024 -> 0: c is negligible
    f = f + c * _i2d(ks << 52)                           # + c * 2**-k
    kf = _i2d(k + _SHIFT64_BITS) - _SHIFT64
    res = _log_tail_f64(f, kf)
    res = res if u < _INF64 else u
    special = -_INF64 if u == 0.0 else _NAN64
    res = res if u > 0.0 else special
    return x if x == 0.0 else res


@njit(**_JIT)
def _expm1_neg_f64(y):
    """expm1(y) for y in [-40, 0] (nan propagates)."""
    _always_inline()
    t = y * _LOG2E64 + _SHIFT64
    n = t - _SHIFT64
    r = (y - n * _LN2HI64) - n * _LN2LO64
    q = _M64_0 + r * (_M64_1 + r * (_M64_2 + r * (_M64_3 + r * (_M64_4 + r * (
        _M64_5 + r * (_M64_6 + r * (_M64_7 + r * (_M64_8 + r * _M64_9))))))))
    p = r + (r * r) * (0.5 + r * q)
    s = _i2d((_d2i(t) - _SHIFT64_BITS + 1023) << 52)    # 2**n
    return s * p + (s - 1.0)


@njit(**_JIT)
def tanh_f64(x):
    _always_inline()
    a = abs(x)
    a = 20.0 if a > 20.0 else a
    t = _expm1_neg_f64(-2.0 * a)
    return math.copysign(t / (-2.0 - t), x)


@njit(**_JIT)
def sigmoid_f64(x):
    _always_inline()
    y = -abs(x)
    y = _EXP_LO64 if y < _EXP_LO64 else y
    e = _exp_core_f64(y)
    num = 1.0 if x >= 0.0 else e
    return num / (1.0 + e)


@njit(**_JIT)
def softplus_f64(x):
    _always_inline()
    y = -abs(x)
    y = _EXP_LO64 if y < _EXP_LO64 else y
    e = _exp_core_f64(y)
    m = x if x > 0.0 else 0.0
    return m + log1p_f64(e)


@njit(**_JIT)
def erf_f64(x):
    _always_inline()
    return math.erf(x)


@njit(**_JIT)
def sin_f64(x):
    _always_inline()
    return math.sin(x)


@njit(**_JIT)
def cos_f64(x):
    _always_inline()
    return math.cos(x)


@njit(**_JIT)
def pow_f64(x, y):
    _always_inline()
    return _libm_pow_f64(x, y)


# ==========================================================================
# Registry used by the code generator
# ==========================================================================

# The names live in a numba-free module so that code generation need not import numba.
from .mathnames import DTYPES, OPS, _SUFFIX, function_name  # noqa: E402,F401
#: ops that compute in pure arithmetic and vectorize (the rest call libm)
VECTORIZED = frozenset(
    [(op, "float32") for op in OPS]
    + [(op, "float64") for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid",
                                  "softplus")])
#: number of arguments of each op
ARITY = {op: (2 if op == "pow" else 1) for op in OPS}


FUNCTIONS = {(op, dt): globals()[function_name(op, dt)] for op in OPS for dt in DTYPES}

#: Documented maximum error in ulps (see the module docstring for how it was
#: measured); the tests assert these bounds.
MAX_ULP = {
    ("exp", "float32"): 1.05, ("exp", "float64"): 1.1,
    ("expm1", "float32"): 1.5, ("expm1", "float64"): 1.9,
    ("log", "float32"): 0.9, ("log", "float64"): 0.95,
    ("log1p", "float32"): 1.5, ("log1p", "float64"): 1.5,
    ("tanh", "float32"): 7.0, ("tanh", "float64"): 2.6,
    ("sigmoid", "float32"): 2.45, ("sigmoid", "float64"): 2.4,
    ("softplus", "float32"): 1.75, ("softplus", "float64"): 1.8,
    ("erf", "float32"): 1.0, ("erf", "float64"): 1.0,
    ("sin", "float32"): 0.501, ("sin", "float64"): 1.0,
    ("cos", "float32"): 0.501, ("cos", "float64"): 1.0,
    ("pow", "float32"): 0.501, ("pow", "float64"): 1.0,
}

#: Hash of this file.  numba's ``cache=True`` only looks at the *kernel's*
#: source, so a kernel cached on disk keeps the old inlined copy of these
#: functions after this file changes: put SOURCE_HASH in the kernel cache key
#: (or in a comment of the generated source).
with open(__file__, "rb") as _f:
    SOURCE_HASH = hashlib.sha256(_f.read()).hexdigest()[:16]
del _f

__all__ = ["FUNCTIONS", "function_name", "OPS", "DTYPES", "VECTORIZED", "ARITY", "MAX_ULP",
           "SOURCE_HASH"] + \
    sorted(function_name(op, dt) for op in OPS for dt in DTYPES)
