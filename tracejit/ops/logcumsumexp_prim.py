"""logcumsumexp as one primitive: the running ``log(exp(a) + exp(b))`` along a dim, the one
definition of the op, eager, traced and compiled (the numpy form in compiled plans).

Why: ``log(cumsum(exp(x - max))) + max`` shifts every prefix by the whole dim's max
(``[-1000, 0]`` underflows to ``[-inf, 0]``, a nan spreads backward); numpy's
``logaddexp.accumulate`` is PyTorch's scan, each prefix exact to rounding. The gradient is
PyTorch's: ``exp(x + rev_lcse(log(g) - out))`` for the positive and the negative parts of
`g` (``rev_lcse`` the scan from the end), written with this primitive and tracejit ops, so
second derivatives follow.
"""
from __future__ import annotations

from ..errors import UnsupportedDTypeError
from .registry import Aval, defprim
from .eager import bind

__all__ = ["logcumsumexp_dim", "LOGCUMSUMEXP"]


def _impl(xp, x, *, dim):
    # (PyTorch carries the running value in a wider type, float32's in float64, and rounds
    # each prefix once: a float32 carry drifts with the dim's length, 4e-5 after 10^4 steps)
    xw = x.astype(xp.float32) if x.dtype == xp.float16 else x.astype(xp.float64) if x.dtype == xp.float32 else x
    try:
        return _cast(xp.logaddexp.accumulate(xw, axis=dim), x.dtype)
    except (AttributeError, NotImplementedError, TypeError):   # (an array module without it)
        out = xw.copy()
        for i in range(1, xw.shape[dim]):
            prev = xp.take(out, [i - 1], axis=dim)
            cur = xp.take(out, [i], axis=dim)
            idx = [slice(None)] * xw.ndim
            idx[dim] = slice(i, i + 1)
            out[tuple(idx)] = xp.logaddexp(prev, cur)
    return _cast(out, x.dtype)


def _cast(a, dtype):
    return a.astype(dtype) if a.dtype != dtype else a


def _rule(x: Aval, *, dim):
    if not x.dtype.is_floating_point:
        raise UnsupportedDTypeError(f"logcumsumexp: expected a floating point tensor, got {x.dtype.name}")
    if not 0 <= dim < len(x.shape):
        raise IndexError(f"logcumsumexp: dim {dim} out of range for a tensor of rank {len(x.shape)}")
    return Aval(x.shape, x.dtype, x.device)


def _vjp(g, out, x, *, dim):
    from .elementwise import exp, log, where
    from .shape import flip
    ninf = float("-inf")

    def reversed_scan(v):
        return flip(logcumsumexp_dim(flip(v, (dim,)), dim), (dim,))
    # (masked after `- out`: where g has no part, nothing flows back into `out`, so second
    # derivatives are right)
    pos = reversed_scan(where(g > 0, log(where(g > 0, g, 1.0)) - out, ninf))
    neg = reversed_scan(where(g < 0, log(where(g < 0, -g, 1.0)) - out, ninf))
    return (exp(x + pos) - exp(x + neg),)


LOGCUMSUMEXP = defprim("logcumsumexp", _impl, _rule, _vjp, kind="other", save=lambda rq: (0,),
                       save_out=True, grad_name="LogcumsumexpBackward0")


def logcumsumexp_dim(x, dim: int):
    """``log(cumsum(exp(x), dim))`` computed stably (`dim` a normalized dim index)."""
    return bind(LOGCUMSUMEXP, x, dim=dim)
