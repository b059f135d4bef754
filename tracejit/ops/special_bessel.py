"""Bessel and Airy functions of ``torch.special``: bessel_j0/j1/y0/y1,
modified_bessel_k0/k1 and their exponentially scaled forms, spherical_bessel_j0 and
airy_ai, each a unary primitive with a float64 numpy form.

- J0, J1, Y0, Y1: their power series (Y's with the logarithmic term) up to |x| = 17,
  Hankel's asymptotic expansion beyond (both accurate to ~1e-13 relative there).
- K0, K1 (scaled or not): K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt by the
  trapezoid rule over a grid scaled to the integrand's width (exponentially accurate for
  this analytic, double-exponentially decaying integrand).
- Ai: for x > 0, sqrt(x / 3) K_{1/3}(2/3 x^{3/2}) / pi by the same integral; for
  -7 <= x <= 0 its Maclaurin series; below, the oscillating asymptotic expansion.

As in PyTorch these functions have no gradient (results do not require grad).
"""
from __future__ import annotations

import math

import numpy as np

from .elementwise import _unary, where
from .registry import bind

__all__ = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
           "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai"]

_EULER = 0.5772156649015329
_CROSS = 17.0   # series below, asymptotic expansion above


def _series_j(x, n, sign: float = -1.0):
    """J_n(x), n in (0, 1), by its power series; with `sign` +1, the modified I_n(x)."""
    q = sign * (x * x) / 4
    term = np.ones_like(x) if n == 0 else x / 2
    total = term.copy()
    for k in range(1, 80):
        term = term * q / (k * (k + n))
        total = total + term
    return total


def _series_y(x, n):
    """Y_n(x), n in (0, 1), x > 0, by its power series with the logarithm."""
    q = -(x * x) / 4
    log = np.log(x / 2)
    if n == 0:
        term, h, total = np.ones_like(x), 0.0, np.zeros_like(x)
        for k in range(1, 80):
            term = term * q / (k * k)
            h += 1.0 / k
            total = total - h * term          # (-1)^(k+1) H_k (x^2/4)^k / k!^2
        return (2 / np.pi) * ((log + _EULER) * _series_j(x, 0) + total)
    term = x / 2
    psi1, psi2 = -_EULER, 1 - _EULER        # psi(k + 1), psi(k + 2)
    total = (psi1 + psi2) * term
    for k in range(1, 80):
        term = term * q / (k * (k + 1))
        psi1 += 1.0 / k
        psi2 += 1.0 / (k + 1)
        total = total + (psi1 + psi2) * term
    return -2 / (np.pi * x) + (2 / np.pi) * log * _series_j(x, 1) - total / np.pi


def _hankel(x, n):
    """(J_n, Y_n) for large x > 0 by Hankel's expansion."""
    mu = 4.0 * n * n
    p, q = np.ones_like(x), np.zeros_like(x)
    a = np.ones_like(x)
    for k in range(1, 40):
        a = a * (mu - (2 * k - 1) ** 2) / (k * 8 * x)
        if k % 2:
            q = q + (-1) ** (k // 2) * a
        else:
            p = p + (-1) ** (k // 2) * a
    chi = x - (n / 2 + 0.25) * np.pi
    amp = np.sqrt(2 / (np.pi * x))
    return amp * (p * np.cos(chi) - q * np.sin(chi)), amp * (p * np.sin(chi) + q * np.cos(chi))


def _j(n):
    def f(x):
        ax = np.abs(x)
        small = ax <= _CROSS
        xs, xl = np.where(small, x, 0.0), np.where(small, _CROSS + 1, ax)
        big = _hankel(xl, n)[0] * (np.sign(x) if n == 1 else 1.0)
        return np.where(small, _series_j(xs, n), big)
    return f


def _y(n):
    def f(x):
        small = x <= _CROSS
        xs, xl = np.where(small & (x > 0), x, 1.0), np.where(small, _CROSS + 1, x)
        out = np.where(small, _series_y(xs, n), _hankel(xl, n)[1])
        out = np.where(x == 0, -np.inf, out)
        return np.where(x < 0, np.nan, out)
    return f


def _k_scaled(x, nu):
    """exp(x) K_nu(x) for x > 0 (other entries: anything)."""
    x = np.where(x > 0, x, 1.0)
    tmax = np.arccosh(1 + 50 / x)                 # exp(-x (cosh t - 1)) < e^-50 beyond
    n = 400
    t = tmax[..., None] * (np.arange(n + 1) / n)
    h = tmax / n
    f = np.exp(-x[..., None] * (np.cosh(t) - 1)) * np.cosh(nu * t)
    return h * (f.sum(-1) - 0.5 * f[..., 0])


def _k(nu, scaled):
    def f(x):
        with np.errstate(over="ignore", under="ignore"):
            out = _k_scaled(x, nu)
            if not scaled:
                out = out * np.exp(-np.where(x > 0, x, 0.0))
        out = np.where(x == 0, np.inf, np.where(np.isposinf(x), 0.0, out))
        return np.where((x < 0) | np.isnan(x), np.nan, out)
    return f


_AI0 = 1 / (3 ** (2 / 3) * math.gamma(2 / 3))     # Ai(0)
_AIP0 = 1 / (3 ** (1 / 3) * math.gamma(1 / 3))    # -Ai'(0)


def _airy(x):
    pos = x > 0
    xp = np.where(pos, x, 1.0)
    zeta = 2 / 3 * xp ** 1.5
    with np.errstate(over="ignore", under="ignore"):
        right = np.sqrt(xp / 3) / np.pi * _k_scaled(zeta, 1 / 3) * np.exp(-zeta)
    mid = (x <= 0) & (x >= -7)
    xm = np.where(mid, x, 0.0)
    c = xm ** 3
    f, g = np.ones_like(xm), xm.copy()
    tf, tg = np.ones_like(xm), xm.copy()
    for k in range(1, 60):     # f = sum 3^k (1/3)_k x^3k / (3k)!, g likewise with (2/3)_k
        tf = tf * c / ((3 * k - 1) * (3 * k))
        tg = tg * c / ((3 * k) * (3 * k + 1))
        f, g = f + tf, g + tg
    middle = _AI0 * f - _AIP0 * g
    z = np.where(x < -7, -x, 8.0)
    ze = 2 / 3 * z ** 1.5
    u = 1.0
    even, odd = np.ones_like(z), np.zeros_like(z)
    for k in range(1, 30):
        u = u * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216 * k)
        term = u / ze ** k
        if k % 2:
            odd = odd + (-1) ** (k // 2) * term
        else:
            even = even + (-1) ** (k // 2) * term
    left = (np.sin(ze + np.pi / 4) * even - np.cos(ze + np.pi / 4) * odd) / (np.sqrt(np.pi) * z ** 0.25)
    out = np.where(pos, right, np.where(mid, middle, left))
    return np.where(np.isfinite(x), out, np.nan)   # (PyTorch's: nan at both infinities, not the limit 0)


def _impl(fn):
    def impl(xp, a):
        v = np.asarray(a)
        with np.errstate(all="ignore"):
            out = fn(np.asarray(v, np.float64))
        return np.asarray(out).astype(v.dtype if v.dtype.kind == "f" else np.float32)
    return impl


def _define(name, fn):
    prim = _unary(name, _impl(fn), None, save_in=False, host=True)

    def f(input):   # (tracejit.special gives it out=, outarg.py)
        return bind(prim, input)
    f.__name__ = name
    return f


bessel_j0 = _define("bessel_j0", _j(0))
bessel_j1 = _define("bessel_j1", _j(1))
bessel_y0 = _define("bessel_y0", _y(0))
bessel_y1 = _define("bessel_y1", _y(1))
modified_bessel_k0 = _define("modified_bessel_k0", _k(0, False))
modified_bessel_k1 = _define("modified_bessel_k1", _k(1, False))
scaled_modified_bessel_k0 = _define("scaled_modified_bessel_k0", _k(0, True))
scaled_modified_bessel_k1 = _define("scaled_modified_bessel_k1", _k(1, True))
airy_ai = _define("airy_ai", _airy)


def spherical_bessel_j0(input):
    """sin(x) / x, 1 at 0."""
    from .elementwise import abs as _abs, sin
    x = input.detach()
    small = _abs(x) < 1e-4
    safe = where(small, 1.0, x)
    return where(small, 1 - x * x / 6, where(_abs(x) == math.inf, 0.0, sin(safe) / safe))
