"""Op records for tracejit/ops/math_more.py: inverse trigonometry, rounding, special
functions, the composite elementwise functions and bitwise ops. References are numpy's
own functions (math.lgamma and a series for digamma where numpy has none)."""
from __future__ import annotations

import math

import numpy as np

from opdb import (FLOATS, INTS, Sample, _bin, _bin_ref, _binary_samples, _un, _unary_samples, arr, away,
                  pos, register)


def _in(lo, hi):
    def make(rng, shape, dtype):
        return np.asarray(rng.uniform(lo, hi, shape), dtype.np)
    return make


def _off_integers(rng, shape, dtype):
    """Values at least 0.1 from every integer and half-integer (rounding's jumps)."""
    base = rng.integers(-3, 3, shape) + rng.choice([0.15, 0.35, 0.65, 0.85], shape)
    return np.asarray(base, dtype.np)


_UNARY = [
    ("asin", np.arcsin, _in(-0.9, 0.9)), ("acos", np.arccos, _in(-0.9, 0.9)), ("atan", np.arctan, arr),
    ("asinh", np.arcsinh, arr), ("acosh", np.arccosh, _in(1.2, 3.0)), ("atanh", np.arctanh, _in(-0.9, 0.9)),
    ("sinh", np.sinh, arr), ("cosh", np.cosh, arr), ("tan", np.tan, _in(-1.2, 1.2)),
    ("log2", np.log2, pos), ("log10", np.log10, pos), ("exp2", np.exp2, arr),
    ("reciprocal", np.reciprocal, away), ("rad2deg", np.rad2deg, arr), ("deg2rad", np.deg2rad, arr),
    ("sinc", np.sinc, away), ("logit", lambda x: np.log(x / (1 - x)), _in(0.1, 0.9)),
    ("erfc", lambda x: 1 - np.vectorize(math.erf)(x), arr),
    ("lgamma", np.vectorize(math.lgamma), _in(0.3, 4.0)),
    ("ceil", np.ceil, _off_integers), ("trunc", np.trunc, _off_integers),
    ("round", np.round, _off_integers), ("frac", lambda x: x - np.trunc(x), _off_integers),
]
for _name, _ref, _make in _UNARY:
    register(_name, _un(_name), _ref, _unary_samples(_make, ((3, 4), (5,), ())), dtypes=FLOATS,
             atol=1e-4 if _name in ("lgamma", "sinh", "cosh", "exp2") else 2e-5)


def _digamma_ref(x):
    # psi(x) = psi(x + 6) - sum 1/(x+k), with the asymptotic series at x + 6
    y = x + 6.0
    acc = -sum(1.0 / (x + k) for k in range(6))
    inv2 = 1.0 / (y * y)
    return acc + np.log(y) - 0.5 / y - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252)))


register("digamma", _un("digamma"), _digamma_ref,
         lambda d, r: [Sample((_in(0.5, 4.0)(r, (3, 4), d),))],
         dtypes=FLOATS, atol=1e-4, rtol=1e-4)


def _erfinv_by_bisection(y):
    lo, hi = np.full(y.shape, -6.0), np.full(y.shape, 6.0)
    erf = np.vectorize(math.erf)
    for _ in range(80):
        mid = (lo + hi) / 2
        below = erf(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


register("erfinv", _un("erfinv"), _erfinv_by_bisection, _unary_samples(_in(-0.9, 0.9), ((3, 4),)),
         dtypes=FLOATS, atol=1e-4)

_BINARY = [("atan2", np.arctan2, arr, away), ("hypot", np.hypot, away, away),
           ("fmod", np.fmod, away, pos), ("logaddexp", np.logaddexp, arr, arr),
           ("logaddexp2", np.logaddexp2, arr, arr), ("copysign", np.copysign, away, away),
           ("xlogy", lambda a, b: np.where(a == 0, 0.0, a * np.log(b)), arr, pos)]
for _name, _ref, _ma, _mb in _BINARY:
    register(_name, _bin(_name), _bin_ref(_ref), _binary_samples(_ma, _mb, scalars=()), dtypes=FLOATS,
             grad=_name not in ("copysign",))

register("lerp", lambda m, a, b, w: m.lerp(a, b, w), lambda a, b, w: a + w * (b - a),
         lambda d, r: [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d), arr(r, (4,), d)))])
register("addcmul", lambda m, a, b, c: m.addcmul(a, b, c, value=0.5), lambda a, b, c: a + 0.5 * b * c,
         lambda d, r: [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d), arr(r, (1, 4), d)))])
register("addcdiv", lambda m, a, b, c: m.addcdiv(a, b, c, value=-2), lambda a, b, c: a - 2 * b / c,
         lambda d, r: [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d), away(r, (3, 4), d)))])

for _name, _ref in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                    ("bitwise_xor", np.bitwise_xor)):
    register(_name, _bin(_name), _bin_ref(_ref), _binary_samples(scalars=()), dtypes=INTS, grad=False)
register("bitwise_not", _un("bitwise_not"), np.invert, _unary_samples(arr, ((3, 4),)), dtypes=INTS, grad=False)
register("signbit", _un("signbit"), np.signbit, _unary_samples(away, ((3, 4),)), dtypes=FLOATS, grad=False)
