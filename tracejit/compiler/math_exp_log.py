"""exp, expm1, log and log1p for generated kernels, float32 and float64 (see mathlib.py).

Pure arithmetic and bit manipulation (mathbits.py), so a kernel's loop calling them
vectorizes; the cores (`_exp_core_f32`, `_expm1_core_f64`, ...) serve the functions of
math_tanh_erf.py too. Accuracy is in mathlib's table. Algorithms:

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

The cores (`_exp_core_*`, `_expm1_core_*`, `_log_tail_*`) are inlined in
numba IR (``inline="always"``) with the same `_JIT` options: compiled apart, a core cost a
worker ~25 ms per kernel module that reached it, and LLVM inlined it anyway.
"""
from __future__ import annotations

from numba import njit

from .mathbits import (_HALF32, _INF32, _INF64, _JIT, _NAN32, _NAN64, _ONE32, _SHIFT32,
                       _SHIFT32_BITS, _SHIFT64, _SHIFT64_BITS, _SQRTHALF64_BITS, _TWO32,
                       _ZERO32, F, _always_inline, _d2i, _f2i, _i2d, _i2f)

# ---- float32 constants
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
_EXP_HI32 = F(89.0)                # exp(89) overflows; keeps n <= 128
_EXP_LO32 = F(-104.0)              # exp(-104) < 2**-150 rounds to 0
_EXPM1_LO32 = F(-20.0)             # expm1(-20) rounds to -1

# ---- float64 constants
_LOG2E64 = 1.4426950408889634
_LN2HI64 = 0.6931471805598903      # 42 significant bits
_LN2LO64 = 5.497923018708371e-14
_MINNORM64 = 2.2250738585072014e-308
_TWO54_64 = 18014398509481984.0
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


def _exp(core, lo, hi):
    """exp of one dtype: `core` on x clamped to [lo, hi]."""
    @njit(**_JIT)
    def exp(x):
        _always_inline()
        xc = hi if x > hi else x
        xc = lo if xc < lo else xc
        return core(xc)
    return exp


def _expm1(core, lo, hi, zero):
    """expm1 of one dtype: `core` on x clamped to [lo, hi], x itself at +-0."""
    @njit(**_JIT)
    def expm1(x):
        _always_inline()
        xc = hi if x > hi else x
        xc = lo if xc < lo else xc
        res = core(xc)
        return x if x == zero else res
    return expm1


# ---------------------------------------------------------------- float32

@njit(inline="always", **_JIT)
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


@njit(inline="always", **_JIT)
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


exp_f32 = _exp(_exp_core_f32, _EXP_LO32, _EXP_HI32)
expm1_f32 = _expm1(_expm1_core_f32, _EXPM1_LO32, _EXP_HI32, _ZERO32)


@njit(inline="always", **_JIT)
def _log_tail_f32(f, kf):
    """k*ln2 + log1p(f) for f in [-0.2929, 0.4143] (slightly beyond is fine)."""
    _always_inline()
    p = _L32_0 + f * (_L32_1 + f * (_L32_2 + f * (_L32_3 + f * (
        _L32_4 + f * (_L32_5 + f * (_L32_6 + f * (_L32_7 + f * _L32_8)))))))
    f2 = f * f
    return kf * _LN2HI32 + (f + (kf * _LN2LO32 + f2 * (f * p - _HALF32)))


@njit(inline="always", **_JIT)
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


@njit(inline="always", **_JIT)
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


exp_f64 = _exp(_exp_core_f64, _EXP_LO64, _EXP_HI64)
expm1_f64 = _expm1(_expm1_core_f64, _EXPM1_LO64, _EXP_HI64, 0.0)


@njit(inline="always", **_JIT)
def _log_tail_f64(f, kf):
    """k*ln2 + log1p(f) for f in [-0.2929, 0.4143] (slightly beyond is fine)."""
    _always_inline()
    s = f / (2.0 + f)
    z = s * s
    tz = z * (_T64_1 + z * (_T64_2 + z * (_T64_3 + z * (_T64_4 + z * (
        _T64_5 + z * (_T64_6 + z * _T64_7))))))
    # log1p(f) = 2s + s*T = f - s*(f - T)
    return kf * _LN2HI64 + (f - (s * (f - tz) - kf * _LN2LO64))


def _logs(tail, f2i, i2f, mant, bias, sqrthalf_bits, shift, shift_bits, minnorm, scale, scale_exp,
          one, zero, inf, nan):
    """(log, log1p) of one dtype: `tail` its `_log_tail_*`, `f2i`/`i2f` its bit casts, `mant`
    and `bias` its mantissa bits and exponent bias; subnormals are scaled by `scale` =
    2**`scale_exp` first."""
    @njit(**_JIT)
    def log(x):
        _always_inline()
        sub = x < minnorm
        xs = x * scale if sub else x
        ib = f2i(xs)
        k = (ib - sqrthalf_bits) >> mant
        f = i2f(ib - (k << mant)) - one
        kf = i2f(k + shift_bits) - shift
        kf = kf - scale_exp if sub else kf
        res = tail(f, kf)
        res = res if x < inf else x
        special = -inf if x == zero else nan
        return res if x > zero else special

    @njit(**_JIT)
    def log1p(x):
        _always_inline()
        u = one + x
        # exact rounding error of u = 1 + x (Fast2Sum, larger operand first)
        c_big = one - (u - x)
        c_small = x - (u - one)
        c = c_big if x > one else c_small
        ib = f2i(u)
        k = (ib - sqrthalf_bits) >> mant
        f = i2f(ib - (k << mant)) - one
        ks = bias - k
        ks = 0 if ks < 0 else ks                      # 2**-(bias+1) -> 0: c is negligible
        f = f + c * i2f(ks << mant)                   # + c * 2**-k
        kf = i2f(k + shift_bits) - shift
        res = tail(f, kf)
        res = res if u < inf else u
        special = -inf if u == zero else nan
        res = res if u > zero else special
        return x if x == zero else res
    return log, log1p


log_f32, log1p_f32 = _logs(_log_tail_f32, _f2i, _i2f, 23, 127, _SQRTHALF32_BITS, _SHIFT32,
                           _SHIFT32_BITS, _MINNORM32, _TWO23_32, F(23.0), _ONE32, _ZERO32, _INF32,
                           _NAN32)
log_f64, log1p_f64 = _logs(_log_tail_f64, _d2i, _i2d, 52, 1023, _SQRTHALF64_BITS, _SHIFT64,
                           _SHIFT64_BITS, _MINNORM64, _TWO54_64, 54.0, 1.0, 0.0, _INF64, _NAN64)
