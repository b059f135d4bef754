"""sin, cos and pow for generated kernels, float32 and float64 (see mathlib.py).

The float32 functions compute internally in float64 and round once at the end; the
float64 ones call the C library (scalar: a vectorizable float64 sin/cos needs a
2**1024-range Payne-Hanek reduction, pow a double-double log). Accuracy is in
mathlib's table. Algorithms:

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

import math

import numpy as np
from numba import njit

from .mathbits import (_INF32, _INF64, _JIT, _NAN64, _ONE32, _SHIFT64, _SHIFT64_BITS,
                       _SQRTHALF64_BITS, D, F, _always_inline, _d2i, _f2i, _i2d,
                       _libm_pow_f64)

# float64-internal constants of the float32 sin/cos/pow
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


# ---------------------------------------------------------------- float32 (float64 inside)

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
def _sin_quadrant_f32(ax, shift):
    """sin(ax + shift*pi/2) of a finite float32 ax >= 0, rounded to float32 (cos: shift 1)."""
    _always_inline()
    f, q = _rem_pio2_f32(ax)
    small = ax < _PIO4_32
    r = D(ax) if small else f * _PIO2
    q = (0 if small else q) + shift
    s = _sin_poly(r)
    c = _cos_poly(r)
    v = c if (q & 1) == 1 else s
    v = -v if (q & 2) == 2 else v
    return F(v)


@njit(**_JIT)
def sin_f32(x):
    _always_inline()
    ax = abs(x)
    res = _sin_quadrant_f32(ax, 0) * math.copysign(_ONE32, x)
    return res if ax < _INF32 else x - x


@njit(**_JIT)
def cos_f32(x):
    _always_inline()
    ax = abs(x)
    res = _sin_quadrant_f32(ax, 1)
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


# ---------------------------------------------------------------- float64 (libm)

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
