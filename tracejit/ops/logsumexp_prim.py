"""logsumexp over one dim as one primitive: the one definition of the op, eager and captured.

Why: as a composite an eager logsumexp is some ten op calls forward (max, its guard
against infinite rows, subtract, exp, sum, log, add) and six autograd nodes backward; a
CRF's forward algorithm, CTC-like recursions and mixture log-likelihoods call it once per
step of a Python loop. As a primitive its numpy form is a few passes, and its gradient is
PyTorch's ``g * exp(x - out)`` (one composite of three elementwise ops). Over the last dim
the CPU backend renders a kernel from the rows form (``extra["rows_form"]``), and compiled
plans schedule that form in the primitive's place, as for softmax (compiler/rowinline.py).

The output keeps the reduced dim (size 1); ``reductions.logsumexp`` drops it unless asked.
"""
from __future__ import annotations

from ..errors import UnsupportedDTypeError
from .registry import Aval, defprim
from .eager import bind
from .elementwise import exp as _exp, isinf as _isinf, log as _log, where as _where
from .reductions import amax as _amax, sum as _sum
from .softmax_prim import on_last_dim

__all__ = ["logsumexp_dim"]


def _impl(xp, x, *, dim):
    m = x.max(axis=dim, keepdims=True)
    m[xp.isinf(m)] = 0    # a row of -inf (or with +inf): shift by 0, never inf - inf
    e = x - m
    xp.exp(e, out=e)
    s = e.sum(axis=dim, keepdims=True)
    with xp.errstate(divide="ignore"):
        xp.log(s, out=s)
    s += m
    return s


def _rule(x: Aval, *, dim):
    if not x.dtype.is_floating_point:
        raise UnsupportedDTypeError(f"logsumexp: expected a floating point tensor, got {x.dtype.name}")
    shape = list(x.shape)
    shape[dim] = 1
    return Aval(tuple(shape), x.dtype, x.device)


def _vjp(g, out, x, *, dim):
    # PyTorch's: nan where x and out are both infinite (-inf rows), as there
    return (g * _exp(x - out),)


def _rows(x, *, dim):
    # the numpy form's steps, in its order (over the last dim: checked by the caller)
    m = _amax(x, -1, keepdim=True)
    m = _where(_isinf(m), 0.0, m)
    return _log(_sum(_exp(x - m), -1, keepdim=True)) + m


LOGSUMEXP = defprim("logsumexp", _impl, _rule, _vjp, kind="other", save=lambda rq: (0,),
                    save_out=True, grad_name="LogsumexpBackward0",
                    extra={"rows_form": _rows, "rows_inline": on_last_dim})


def logsumexp_dim(x, dim: int):
    """log(sum(exp(x))) along `dim` (a normalized dim index), keeping it as size 1."""
    return bind(LOGSUMEXP, x, dim=dim)
