"""Special functions beyond the gamma family, with PyTorch's names: polygamma of any
order, the Hurwitz zeta function, the regularized incomplete gamma functions, the
modified Bessel functions i0/i1 and their exponentially scaled forms, and frexp/ldexp.

Each function is a primitive with a numpy form in float64 (the accuracy PyTorch's
float64 results have) and a VJP written with the other records, so gradients of any
order follow: d/dx polygamma(n) = polygamma(n + 1), i0' = i1, i1' = i0 - i1/x.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .. import dtypes as _dt
from .elementwise import _binary, _int_result, _op1, _unary, cast, sign, where
from .registry import bind
from .math_more import _lgamma_impl
from .special_bessel import _series_j

__all__ = ["polygamma", "i0", "frexp", "ldexp", "igamma", "igammac"]

# Bernoulli numbers B2, B4, ..., B14 (Euler-Maclaurin tail of the Hurwitz zeta)
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)
_SHIFT = 12.0   # arguments are shifted up to here before the asymptotic tail


def _hurwitz_zeta(s, x: np.ndarray) -> np.ndarray:
    """zeta(s, x) = sum_k (x + k)^-s for s > 1 (a number or an array broadcasting with x),
    by shifting x up to _SHIFT and the Euler-Maclaurin tail there (float64 to ~1e-15
    relative)."""
    x = np.asarray(x, np.float64)
    if not isinstance(s, (int, np.integer)):
        s, x = np.broadcast_arrays(np.asarray(s, np.float64), x)
    acc = np.zeros_like(x)
    y = x.copy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while True:
            low = y < _SHIFT
            if not low.any():
                break
            acc = acc + np.where(low, np.where(low, y, 1.0) ** -s, 0.0)
            y = np.where(low, y + 1.0, y)
        tail = y ** (1 - s) / (s - 1) + 0.5 * y ** -s
        rising = s * 1.0                # s (s+1) ... (s+2j-2)
        power = y ** (-s - 1)
        fact = 2.0                      # (2j)!
        for j, b in enumerate(_BERNOULLI, start=1):
            tail = tail + b / fact * rising * power
            rising *= (s + 2 * j - 1) * (s + 2 * j)
            power = power / (y * y)
            fact *= (2 * j + 1) * (2 * j + 2)
        out = acc + tail
        if isinstance(s, (int, np.integer)):
            return np.where((x <= 0) & (x == np.floor(x)), np.inf if s % 2 == 0 else np.nan, out)
        # torch.special.zeta's domain (Cephes'): inf at s == 1 and at the poles x = 0, -1, ...;
        # nan for s < 1 and for a negative x with a non-integer s
        out = np.where((x < 0) & (s != np.floor(s)), np.nan, out)
        out = np.where((x <= 0) & (x == np.floor(x)), np.inf, out)
        out = np.where(s == 1, np.inf, np.where(s < 1, np.nan, out))
    return out


def _float_out(xp, out, *like):
    dt = np.result_type(*[np.asarray(a).dtype for a in like])
    return np.asarray(out).astype(dt if dt.kind == "f" else np.float32)


def _zeta_impl(xp, s, q):
    return _float_out(xp, _hurwitz_zeta(np.asarray(s, np.float64), np.asarray(q, np.float64)), s, q)


def _zeta_vjp(g, out, s, q):
    return (None, g * -s * bind(ZETA, s + 1, q))


def _no_grad_first(name, vjp):
    def first(g, out, a, b):
        raise NotImplementedError(f"{name}: the derivative with respect to its first argument is not "
                                  f"implemented (as in PyTorch); detach() it")
    return first


ZETA = _binary("zeta", _zeta_impl, _zeta_vjp, int_to_float=True, save=lambda rq: (0, 1), host=True)
ZETA_GRAD_S = _binary("zeta_grad_s", _zeta_impl, _no_grad_first("special.zeta", _zeta_vjp),
                      int_to_float=True, save=lambda rq: (0, 1), host=True)


def _needs_grad(t) -> bool:
    return bool(getattr(t, "requires_grad", False))


def zeta(input, other):
    """The Hurwitz zeta function sum_k (other + k)^-input."""
    return bind(ZETA_GRAD_S if _needs_grad(input) else ZETA, input, other)


# ---------------------------------------------------------------- incomplete gamma
def _igamma_np(a: np.ndarray, x: np.ndarray, upper: bool) -> np.ndarray:
    """The regularized incomplete gamma P(a, x) (Q = 1 - P when upper): its power series
    below x = a + 1, the continued fraction of Q above (float64)."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    ok = (a > 0) & (x > 0) & np.isfinite(x) & np.isfinite(a)
    aa, xx = np.where(ok, a, 1.0), np.where(ok, x, 1.0)
    with np.errstate(all="ignore"):
        front = np.exp(aa * np.log(xx) - xx - _lgamma_impl(np, aa))
        term = 1.0 / aa
        total = term.copy()
        for k in range(1, 2000):   # the ratio x / (a + k) < 1 once k > x - a
            term = term * xx / (aa + k)
            total = total + term
            if k % 50 == 0 and np.all(np.abs(term) <= 1e-17 * np.abs(total)):
                break
        p_series = front * total
        # Q by the modified Lentz continued fraction
        tiny = 1e-300
        b = xx + 1 - aa
        c = np.full_like(b, 1 / tiny)
        d = 1 / np.where(b == 0, tiny, b)
        h = d.copy()
        for i in range(1, 500):
            an = -i * (i - aa)
            b = b + 2
            d = an * d + b
            d = 1 / np.where(np.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            h = h * d * c
        q_cf = front * h
    series = xx < aa + 1
    p = np.where(series, p_series, 1 - q_cf)
    q = np.where(series, 1 - p_series, q_cf)
    out = q if upper else p
    # the edges: x = 0, x = inf, a = 0 (PyTorch's values), nan outside the domain
    lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)
    out = np.where((x == 0) & (a > 0), lo, out)
    out = np.where(np.isposinf(x) & (a > 0), hi, out)
    out = np.where((a == 0) & (x > 0), hi, out)
    return np.where((a < 0) | (x < 0) | np.isnan(a) | np.isnan(x) | ((a == 0) & (x == 0)), np.nan, out)


def _igamma_impl(upper):
    def impl(xp, a, x):
        return _float_out(xp, _igamma_np(np.asarray(a), np.asarray(x), upper), a, x)
    return impl


def _igamma_vjp(sign):
    def vjp(g, out, a, x):
        from .elementwise import exp, log
        from .math_more import lgamma
        return (None, sign * g * exp((a - 1) * log(x) - x - lgamma(a)))
    return vjp


IGAMMA = _binary("igamma", _igamma_impl(False), _igamma_vjp(1.0), int_to_float=True, save=lambda rq: (0, 1),
                 host=True)
IGAMMAC = _binary("igammac", _igamma_impl(True), _igamma_vjp(-1.0), int_to_float=True, save=lambda rq: (0, 1),
                  host=True)
IGAMMA_GRAD_A = _binary("igamma_grad_a", _igamma_impl(False), _no_grad_first("igamma", None), int_to_float=True,
                        save=lambda rq: (), host=True)
IGAMMAC_GRAD_A = _binary("igammac_grad_a", _igamma_impl(True), _no_grad_first("igammac", None), int_to_float=True,
                         save=lambda rq: (), host=True)


def igamma(input, other):
    """The regularized lower incomplete gamma function P(input, other)."""
    return bind(IGAMMA_GRAD_A if _needs_grad(input) else IGAMMA, input, other)


def igammac(input, other):
    """The regularized upper incomplete gamma function Q(input, other) = 1 - P."""
    return bind(IGAMMAC_GRAD_A if _needs_grad(input) else IGAMMAC, input, other)


def _polygamma_impl(xp, a, n):
    v = np.asarray(a)
    out = (-1) ** (n + 1) * math.factorial(n) * _hurwitz_zeta(n + 1, v)
    return np.asarray(out).astype(v.dtype)


POLYGAMMA = _unary("polygamma", _polygamma_impl,
                   lambda g, out, a, n: (g * bind(POLYGAMMA, a, n=n + 1),), host=True)


def polygamma(n: int, input):
    """The n-th derivative of digamma (``polygamma(0, x)`` is digamma)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"polygamma: n must be a non-negative int, got {n!r}")
    if n == 0:
        from .math_more import digamma
        return digamma(input)
    return bind(POLYGAMMA, input, n=int(n))


# ---------------------------------------------------------------- modified Bessel functions
def _bessel_scaled(x: np.ndarray, order: int) -> np.ndarray:
    """exp(-|x|) I_order(x) in float64: the power series below 30 (all terms of one sign,
    so no cancellation), the asymptotic series above."""
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    small = ax <= 30.0
    xs = np.where(small, ax, 0.0)
    series = _series_j(xs, order, 1.0) * np.exp(-xs)
    xl = np.where(small, 30.0, ax)
    mu = 4.0 * order * order
    coef = np.ones_like(xl)
    asym = np.ones_like(xl)
    for k in range(1, 12):
        coef = coef * -(mu - (2 * k - 1) ** 2) / (k * 8 * xl)
        asym = asym + coef
    asym = asym / np.sqrt(2 * np.pi * xl)
    out = np.where(small, series, asym)
    return out * np.sign(x) if order == 1 else out


def bessel_i0_f64(x) -> np.ndarray:
    """I0(x) in float64 for a numpy array (kaiser_window's values)."""
    x = np.asarray(x, np.float64)
    return _bessel_scaled(x, 0) * np.exp(np.abs(x))


def _bessel_impl(order: int, scaled: bool):
    def impl(xp, a):
        v = np.asarray(a)
        out = _bessel_scaled(v, order)
        if not scaled:
            with np.errstate(over="ignore", invalid="ignore"):
                out = out * np.exp(np.abs(np.asarray(v, np.float64)))
        return np.asarray(out).astype(v.dtype)
    return impl


def _i1_vjp(g, out, a):
    # I1'(x) = I0(x) - I1(x)/x, with the limit 1/2 at 0
    safe = where(a == 0, 1.0, a)
    return (g * where(a == 0, 0.5, bind(I0, a) - out / safe),)


def _i1e_vjp(g, out, a):
    safe = where(a == 0, 1.0, a)
    return (g * where(a == 0, 0.5, bind(I0E, a) - out * (sign(a) + 1 / safe)),)


I0 = _unary("i0", _bessel_impl(0, False), lambda g, out, a: (g * bind(I1, a),), host=True)
I1 = _unary("i1", _bessel_impl(1, False), _i1_vjp, save_out=True, host=True)
I0E = _unary("i0e", _bessel_impl(0, True), lambda g, out, a: (g * (bind(I1E, a) - sign(a) * out),),
             save_out=True, host=True)
I1E = _unary("i1e", _bessel_impl(1, True), _i1e_vjp, save_out=True, host=True)


# i0: the modified Bessel function of the first kind, order 0; i0e: exp(-|x|) i0(x), finite
# where i0 overflows (i1 and i1e likewise for order 1)
i0, i1, i0e, i1e = map(_op1, (I0, I1, I0E, I1E))


# ---------------------------------------------------------------- mantissa and exponent
def frexp(input):
    """(mantissa, exponent) with input = mantissa * 2**exponent, |mantissa| in [0.5, 1);
    the exponent is int32, as in PyTorch."""
    if not input.dtype.is_floating_point:
        raise TypeError(f"frexp: expected a floating point tensor, got {input.dtype}")
    from .creation import tensor
    from .registry import refuse_tracing
    refuse_tracing("frexp", "its input")
    e = np.frexp(input.detach().numpy())[1]
    # mantissa = input * 2**-e, exact, differentiable as PyTorch's (grad / 2**e); scaled in
    # two halves, as 2**-e of a subnormal input overflows its dtype
    half = -e // 2
    m = input
    for k in (half, -e - half):
        m = m * tensor(np.ldexp(np.ones(k.shape, input.dtype.np), k), device=input.device)
    return _Frexp(m, tensor(e.astype(np.int32), device=input.device))


def ldexp(input, other):
    """input * 2**other (other an integer tensor or number)."""
    from ..tensor import Tensor
    if isinstance(other, Tensor):
        # powers of two are exact in floating point (exp(k log 2) would not be)
        dt = _int_result(input, other)   # (PyTorch's promotion: a 0-d operand yields to a dim one)
        scale = 2.0 ** cast(other, dt if dt.is_floating_point else _dt.get_default_dtype())
    else:
        scale = 2.0 ** other
    return input * scale


_Frexp = namedtuple("frexp", ["mantissa", "exponent"])
