"""The classical orthogonal polynomials of ``torch.special``: Chebyshev T, U, V, W (and
their shifted forms on [0, 1]), Hermite H and He, Laguerre L and Legendre P, each
``f(input, n)`` elementwise over the broadcast of x and the degree n (truncated to an
integer; negative degrees give 0).

One primitive per family with a float64 numpy form: the three-term recurrence up to the
largest degree asked for, each element keeping its own degree's value, and for the
Chebyshev families PyTorch's trigonometric forms where it uses them (|x| < 1 and degree
above 6 or 8), so values agree with PyTorch's to rounding. As in PyTorch, they have no
gradient (results do not require grad).
"""
from __future__ import annotations

import numpy as np

from .elementwise import _binary
from .registry import bind

__all__ = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
           "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
           "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
           "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


def _step(kind: str):
    """(p0, p1, next) of the family's recurrence: next(x, k, p_{k-1}, p_k) = p_{k+1}."""
    two = lambda x, k, a, b: 2 * x * b - a   # noqa: E731
    return {
        "t": (lambda x: 1.0, lambda x: x, two),
        "u": (lambda x: 1.0, lambda x: 2 * x, two),
        "v": (lambda x: 1.0, lambda x: 2 * x - 1, two),
        "w": (lambda x: 1.0, lambda x: 2 * x + 1, two),
        "h": (lambda x: 1.0, lambda x: 2 * x, lambda x, k, a, b: 2 * x * b - 2 * k * a),
        "he": (lambda x: 1.0, lambda x: x, lambda x, k, a, b: x * b - k * a),
        "l": (lambda x: 1.0, lambda x: 1 - x, lambda x, k, a, b: ((2 * k + 1 - x) * b - k * a) / (k + 1)),
        "p": (lambda x: 1.0, lambda x: x, lambda x, k, a, b: ((2 * k + 1) * x * b - k * a) / (k + 1)),
    }[kind]


def _recurrence(kind: str, x: np.ndarray, n: np.ndarray) -> np.ndarray:
    p0, p1, nxt = _step(kind)
    out = np.where(n == 0, 1.0, 0.0) + np.where(n == 1, p1(x), 0.0)
    top = int(n.max()) if n.size else 0
    a, b = np.broadcast_to(np.float64(p0(x)), x.shape), p1(x)
    for k in range(1, top):
        a, b = b, nxt(x, k, a, b)
        out = np.where(n == k + 1, b, out)
    return out


def _chebyshev_trig(kind: str, x, n, out):
    """PyTorch's closed forms for |x| < 1 and a high degree."""
    inside = np.abs(x) < 1
    th = np.arccos(np.where(inside, x, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "t":
            val, high = np.cos(n * th), n > 6
        elif kind == "u":
            s = np.sin(th)
            val, high = np.where(s != 0, np.sin((n + 1) * th) / s, (n + 1) * np.cos((n + 1) * th) / x), n > 8
        elif kind == "v":
            c = np.cos(th / 2)
            val, high = np.cos((n + 0.5) * th) / c, n > 8
            val = np.where(np.sin(th / 2) != 1, val, np.where(n % 2 == 0, n + 1.0, -(n + 1.0)))
        else:
            s = np.sin(th / 2)
            val, high = np.sin((n + 0.5) * th) / s, n > 8
            val = np.where(np.cos(th / 2) != 1, val, np.where(x > 0, 2.0 * n + 1, 0.0))
    return np.where(inside & high, val, out)


def _impl(kind: str, shifted: bool):
    def impl(xp, x, n):
        xa = np.asarray(x)
        dt = np.result_type(xa.dtype, np.float32) if xa.dtype.kind == "f" else np.float64
        x64 = np.asarray(x, np.float64)
        if shifted:
            x64 = x64 + x64 - 1
        nn = np.trunc(np.asarray(n, np.float64))
        x64, nn = np.broadcast_arrays(x64, nn)
        ni = np.where(np.isfinite(nn) & (nn >= 0), nn, -1).astype(np.int64)
        with np.errstate(all="ignore"):
            out = _recurrence(kind, x64, ni)
            if kind in ("t", "u", "v", "w"):
                out = _chebyshev_trig(kind, x64, ni.astype(np.float64), out)
        out = np.where(ni < 0, 0.0, out)
        return np.asarray(out).astype(dt if xa.dtype.kind == "f" else np.asarray(out).dtype)
    return impl


def _define(name: str, kind: str, shifted: bool = False):
    prim = _binary(name, _impl(kind, shifted), None, int_to_float=True, save=lambda rq: (),
                   host=True)

    def fn(input, n):   # (tracejit.special gives it out=, outarg.py)
        from ..tensor import Tensor
        if not isinstance(input, Tensor) and not isinstance(n, Tensor):
            raise TypeError(f"special.{name}: expected a Tensor for input or n")
        return bind(prim, input, n)
    fn.__name__ = name
    fn.__doc__ = f"The {name.replace('_', ' ')} of degree n at input, elementwise."
    return fn


chebyshev_polynomial_t = _define("chebyshev_polynomial_t", "t")
chebyshev_polynomial_u = _define("chebyshev_polynomial_u", "u")
chebyshev_polynomial_v = _define("chebyshev_polynomial_v", "v")
chebyshev_polynomial_w = _define("chebyshev_polynomial_w", "w")
shifted_chebyshev_polynomial_t = _define("shifted_chebyshev_polynomial_t", "t", True)
shifted_chebyshev_polynomial_u = _define("shifted_chebyshev_polynomial_u", "u", True)
shifted_chebyshev_polynomial_v = _define("shifted_chebyshev_polynomial_v", "v", True)
shifted_chebyshev_polynomial_w = _define("shifted_chebyshev_polynomial_w", "w", True)
hermite_polynomial_h = _define("hermite_polynomial_h", "h")
hermite_polynomial_he = _define("hermite_polynomial_he", "he")
laguerre_polynomial_l = _define("laguerre_polynomial_l", "l")
legendre_polynomial_p = _define("legendre_polynomial_p", "p")
