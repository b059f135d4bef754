"""Special functions numpy lacks, for the eager path.

erf: float32 (and float16) arrays use the compiled kernels' approximation (`_erf_coeffs`,
2.5 ulp at most) with numpy's vectorized arithmetic, 100x faster than a Python call per
element; float64 keeps Python's correctly rounded ``math.erf`` per element.
"""
from __future__ import annotations

import math

import numpy as np

from ._erf_coeffs import ERF32_BIG, ERF32_SMALL

_erf_u = np.frompyfunc(math.erf, 1, 1)
_SMALL = tuple(np.float32(c) for c in ERF32_SMALL)
_BIG = tuple(np.float32(c) for c in ERF32_BIG)


def _horner(t: np.ndarray, coeffs: tuple) -> np.ndarray:
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def _erf_f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.minimum(np.abs(x, dtype=np.float32), np.float32(4.0))   # nan stays nan
        z = a * a
        small = a + a * _horner(z, _SMALL)
        big = np.float32(1.0) - np.exp(-z) * _horner(a - np.float32(1.0), _BIG)
        r = np.where(a < np.float32(1.0), small, big)
        return np.copysign(r, x.astype(np.float32, copy=False))


def erf(a: np.ndarray) -> np.ndarray:
    if a.dtype in (np.float32, np.float16):
        return _erf_f32(a).astype(a.dtype, copy=False)
    return np.asarray(_erf_u(a), dtype=a.dtype)
