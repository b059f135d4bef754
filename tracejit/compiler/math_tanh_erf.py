"""tanh, sigmoid, softplus and erf for generated kernels, float32 and float64 (see mathlib.py).

The activation functions: pure arithmetic (float64 erf excepted, which calls libm),
built on the exponential cores of math_exp_log.py. Accuracy is in mathlib's table.
Algorithms:

* tanh (float32): x*P(x^2)/Q(x^2), degrees 5 and 3 in x^2, x clamped to
  +-9.0109138 (the smallest float32 whose tanh rounds to 1), P(0) = Q(0) = 1
  so tanh(x) = x exactly for tiny x. The fit (``tools/fit_tanh_f32.py``, a
  minimax in float32 ulps, which also runs the exhaustive check) is good to
  1.9 ulp, 7.0 ulp in all with the float32 evaluation's rounding; a final
  clamp keeps |tanh| <= 1. We accept the error for speed: the expm1-based
  version (2.5 ulp) left the GELU kernel compute-bound at 1.45x the time.
* tanh (float64): t = expm1(-2|x|) (|x| clamped to 20: expm1's core range), tanh =
  -t/(t+2) with the sign of x; no cancellation anywhere and tanh(x)=x for tiny x.
* sigmoid: e = exp(-|x|), (1 or e)/(1+e), so both tails are accurate
  (including the subnormal range for x < -87).
* softplus: max(x,0) + log1p(exp(-|x|)).
* erf (float32): |x| < 1: x + x*P(x^2); 1 <= |x| < 4: 1 - exp(-x^2)*Q(|x|-1);
  clamped at 4 where erf rounds to 1.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..ops._erf_coeffs import ERF32_BIG, ERF32_SMALL
from .math_exp_log import (_EXP_LO32, _EXP_LO64, _exp_core_f32, _exp_core_f64,
                           _expm1_core_f64, log1p_f32, log1p_f64)
from .mathbits import _JIT, _ONE32, _ZERO32, F, _always_inline, _f2i, _i2f

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
_SIGN_BIT32 = np.int32(-2147483648)   # 0x80000000


def _sigmoid(exp_core, lo, one, zero):
    """sigmoid of one dtype: e = exp(-|x|) by `exp_core` (clamped at `lo`), (1 or e)/(1+e)."""
    @njit(**_JIT)
    def sigmoid(x):
        _always_inline()
        y = -abs(x)
        y = lo if y < lo else y
        e = exp_core(y)                                       # in [0, 1]
        num = one if x >= zero else e
        return num / (one + e)
    return sigmoid


def _softplus(exp_core, log1p, lo, zero):
    """softplus of one dtype: max(x, 0) + log1p(exp(-|x|))."""
    @njit(**_JIT)
    def softplus(x):
        _always_inline()
        y = -abs(x)
        y = lo if y < lo else y
        e = exp_core(y)                                       # in [0, 1]
        m = x if x > zero else zero
        return m + log1p(e)
    return softplus


sigmoid_f32 = _sigmoid(_exp_core_f32, _EXP_LO32, _ONE32, _ZERO32)
sigmoid_f64 = _sigmoid(_exp_core_f64, _EXP_LO64, 1.0, 0.0)
softplus_f32 = _softplus(_exp_core_f32, log1p_f32, _EXP_LO32, _ZERO32)
softplus_f64 = _softplus(_exp_core_f64, log1p_f64, _EXP_LO64, 0.0)


# ---------------------------------------------------------------- float32

@njit(**_JIT)
def tanh_f32(x):
    # A rational function of x^2 (as Eigen and XLA do): no range reduction, a third less
    # arithmetic. Evaluated on |x| with x's sign restored at the end, so each clamp is one
    # vminps (same bits: rounding is symmetric).
    _always_inline()
    a = abs(x)
    a = _TANH_SAT32 if a > _TANH_SAT32 else a          # nan falls through
    t = a * a
    p = _ONE32 + t * (_TP32_1 + t * (_TP32_2 + t * (_TP32_3 + t * (_TP32_4 + t * _TP32_5))))
    q = _ONE32 + t * (_TQ32_1 + t * (_TQ32_2 + t * _TQ32_3))
    r = a * p / q                                       # exactly 1 at SAT
    # rounding in P and Q can put r a couple of ulps above 1 for |x| in (7.9, SAT);
    # tanh <= 1 is kept exactly (nan falls through)
    r = _ONE32 if r > _ONE32 else r
    # x's sign onto r, whose sign bit is clear: one xor (-0.0 stays -0.0)
    return _i2f(_f2i(r) ^ (_f2i(x) & _SIGN_BIT32))


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


# ---------------------------------------------------------------- float64

@njit(**_JIT)
def tanh_f64(x):
    _always_inline()
    a = abs(x)
    a = 20.0 if a > 20.0 else a
    t = _expm1_core_f64(-2.0 * a)
    return math.copysign(t / (-2.0 - t), x)


@njit(**_JIT)
def erf_f64(x):
    _always_inline()
    return math.erf(x)


@njit(**_JIT)
def erfc_f32(x):
    _always_inline()
    return np.float32(math.erfc(np.float64(x)))   # (eager's bits: math.erfc of the float64)


@njit(**_JIT)
def erfc_f64(x):
    _always_inline()
    return math.erfc(x)
