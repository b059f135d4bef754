"""logsumexp as one primitive, and its gradient as another: the one definition of the op,
eager, traced and compiled, over any dims, with or without keepdim, in every float dtype.

Why: as a composite an eager logsumexp is some ten op calls forward (max, its guard
against infinite rows, subtract, exp, sum, log, add) and six autograd nodes backward; a
CRF's forward algorithm, CTC-like recursions and mixture log-likelihoods call it once per
step of a Python loop. As a primitive its numpy form is a few passes, and its gradient
one more primitive, PyTorch's ``g * exp(x - out)`` (g and out given back their reduced
dims). Over the last dim compiled plans schedule the rows form (``extra["rows_form"]``)
in the primitive's place, as for softmax (compiler/rowinline.py), and the gradient's
elementwise form over any dims.

Rows as PyTorch computes them: the shift is the row's max, 0 where that is infinite, so
a row of -inf gives -inf, a row holding +inf gives +inf and a row holding nan gives nan.
float16 is computed in float32 and rounded once (bfloat16 is widened by the eager path).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedDTypeError
from .registry import Aval, defprim, shift_dims
from .eager import bind
from .elementwise import exp as _exp, isinf as _isinf, log as _log, where as _where
from .reductions import _reduced_shape, amax as _amax, sum as _sum
from .shape import reshape as _reshape

__all__ = ["logsumexp_dims", "LOGSUMEXP", "LOGSUMEXP_BACKWARD"]


def _kept(shape, dims) -> tuple:
    return _reduced_shape(tuple(shape), dims, True)


def _impl(xp, x, *, dims, keepdim):
    if x.ndim == 0:   # (numpy reduces a 0-d array to a scalar, which the steps write into)
        return _impl(xp, x.reshape(1), dims=(0,), keepdim=True).reshape(())
    xw = x.astype(xp.float32) if x.dtype == xp.float16 else x
    front = _front(xw, dims) if xp is np and dims[0] != 0 else None
    s = _steps(xp, xw, dims) if front is None else _steps(xp, front, (0,))
    s = s.reshape(_reduced_shape(x.shape, dims, keepdim))
    return s.astype(x.dtype) if s.dtype != x.dtype else s


# numpy reduces a short dim row by row (~40 ns a row), so a CRF step's (32, 9, 9) over
# dim 1 paid per row; with the reduced dims copied to the front each reduction is one
# elementwise pass over whole rows (2x there). From extents of 128 on the last dim, and
# below some 64 rows, the copy costs more than it saves.
FRONT_EXTENT = 64
FRONT_ROWS = 64


def _front(x, dims):
    """`x` with `dims` (sorted, not the leading ones) copied to the front as one dim, when
    their extent is at most FRONT_EXTENT and the other dims hold FRONT_ROWS rows; else None."""
    n = math.prod(x.shape[d] for d in dims)
    if not 0 < n <= FRONT_EXTENT or x.size < n * FRONT_ROWS:
        return None
    rest = tuple(d for d in range(x.ndim) if d not in dims)
    lead = x.transpose(tuple(dims) + rest)
    return np.ascontiguousarray(lead).reshape((n,) + lead.shape[len(dims):])


def _steps(xp, xw, dims):
    """log(sum(exp(xw))) over `dims`, shifted by each row's max (kept dims)."""
    m = xw.max(axis=dims, keepdims=True)
    m[xp.isinf(m)] = 0    # (a row of -inf, or holding +inf: shifted by 0, never inf - inf)
    e = xw - m
    xp.exp(e, out=e)
    s = e.sum(axis=dims, keepdims=True)
    with xp.errstate(divide="ignore"):
        xp.log(s, out=s)
    s += m
    return s


def _check_dims(op: str, x: Aval, dims) -> None:
    for d in dims:
        if not 0 <= d < max(x.ndim, 1):
            raise IndexError(f"{op}: dim {d} out of range for a tensor of rank {x.ndim}")


def _rule(x: Aval, *, dims, keepdim):
    if not x.dtype.is_floating_point:
        raise UnsupportedDTypeError(f"logsumexp: expected a floating point tensor, got {x.dtype.name}")
    _check_dims("logsumexp", x, dims)
    return Aval(_reduced_shape(tuple(x.shape), dims, keepdim), x.dtype, x.device)


def _rows(x, *, dims, keepdim):
    # the numpy form's steps, in its order (over the last dim: checked by `_on_last_dim`)
    m = _amax(x, -1, keepdim=True)
    m = _where(_isinf(m), 0.0, m)
    out = _log(_sum(_exp(x - m), -1, keepdim=True)) + m
    return out if keepdim else _reshape(out, tuple(x.shape[:-1]))


def _on_last_dim(x, *, dims, keepdim) -> bool:
    return x.ndim > 0 and tuple(dims) == (x.ndim - 1,) and x.dtype.name in ("float32", "float64")


LOGSUMEXP = defprim("logsumexp", _impl, _rule,
                    lambda g, out, x, **p: (bind(LOGSUMEXP_BACKWARD, g, x, out, **p),),
                    kind="other", save=lambda rq: (0,), save_out=True,
                    grad_name="LogsumexpBackward0",
                    extra={"rows_form": _rows, "rows_inline": _on_last_dim, "batch": shift_dims,
                           "row_major": True})


# ---------------------------------------------------------------- the gradient
def _bwd_impl(xp, g, x, out, *, dims, keepdim):
    if x.ndim == 0:
        return _bwd_impl(xp, g.reshape(1), x.reshape(1), out.reshape(1), dims=(0,),
                         keepdim=True).reshape(())
    kept = _kept(x.shape, dims)
    xw = x.astype(xp.float32) if x.dtype == xp.float16 else x
    with xp.errstate(invalid="ignore"):     # (nan where x and out are both infinite: -inf
        d = xw - out.reshape(kept)          # rows, as PyTorch's)
    xp.exp(d, out=d)
    d *= g.reshape(kept)
    return d.astype(x.dtype) if d.dtype != x.dtype else d


def _bwd_rule(g: Aval, x: Aval, out: Aval, *, dims, keepdim):
    _check_dims("logsumexp_backward", x, dims)
    want = _reduced_shape(tuple(x.shape), dims, keepdim)
    for name, a in (("gradient", g), ("result", out)):
        if tuple(a.shape) != want:
            raise ValueError(f"logsumexp_backward: {name} of shape {tuple(a.shape)} should be {want} "
                             f"for an input of shape {tuple(x.shape)} reduced over {tuple(dims)}")
    return Aval(tuple(x.shape), x.dtype, x.device)


def _bwd_vjp(u, y, g, x, out, *, dims, keepdim, needs=(True, True, True)):
    # y = g' * p with p = exp(x - out') (' : the reduced dims given back): d/dg sums u * p
    # over the dims, d/dx is u * y, d/dout sums -u * y
    kept = _kept(x.shape, dims)
    shape = tuple(g.shape)
    uy = u * y if needs[1] or needs[2] else None
    gg = (_reshape(_sum(u * _exp(x - _reshape(out, kept)), dims, keepdim=True), shape)
          if needs[0] else None)
    gout = _reshape(-_sum(uy, dims, keepdim=True), shape) if needs[2] else None
    return gg, (uy if needs[1] else None), gout


def _bwd_rows(g, x, out, *, dims, keepdim):
    # elementwise over any dims (g and out broadcast along them): fuses with x's producer
    kept = _kept(x.shape, dims)
    return _reshape(g, kept) * _exp(x - _reshape(out, kept))


def _bwd_inline(g, x, out, *, dims, keepdim) -> bool:
    return x.ndim > 0 and x.dtype.name in ("float32", "float64")


LOGSUMEXP_BACKWARD = defprim("logsumexp_backward", _bwd_impl, _bwd_rule, _bwd_vjp, kind="other",
                             save_out=True, extra={"needs": True, "rows_form": _bwd_rows,
                                                   "rows_inline": _bwd_inline, "batch": shift_dims})


def logsumexp_dims(x, dims: tuple, keepdim: bool):
    """log(sum(exp(x))) over `dims` (normalized dim indices, none repeated)."""
    return bind(LOGSUMEXP, x, dims=tuple(sorted(dims)), keepdim=bool(keepdim))
