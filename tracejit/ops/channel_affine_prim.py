"""The per-channel affine ``y = x * w[c] + b[c]`` of an (N, C, ...) tensor as a primitive,
and its backward as another: the one definition of the op, eager and captured.

Why: group, instance and inference-mode batch normalization end with this affine. As two
broadcast ops it is two full-size passes forward and, backward, four (``g * w``,
``g * x``, and two reductions over every dim but 1, each a slow strided walk). Here the
forward is one op and the backward one op writing dx, dw and db into one flat record
(``[dx | dw | db]``, the parts a call has), which the VJP cuts apart as views.

Compiled plans inline the forward's form (two broadcast ops, `_affine_form`) so it fuses
with the work around it (compiler/rowinline.py). ``channel_affine_backward`` has a VJP
of its own written with differentiable ops, so every higher order is exact.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from .eager import bind
from .registry import Aval, defprim

__all__ = ["channel_affine"]


def _view(x) -> tuple:
    """The (1, C, 1, ...) shape of a per-channel operand of an (N, C, ...) `x`."""
    return (1, x.shape[1]) + (1,) * (len(x.shape) - 2)


def _affine_impl(xp, x, *wb, has_w, has_b):
    view = _view(x)
    wb = list(wb)
    if has_w:
        out = xp.multiply(x, wb.pop(0).reshape(view))
        if has_b:
            xp.add(out, wb.pop(0).reshape(view), out=out)
        return out
    return xp.add(x, wb.pop(0).reshape(view)) if has_b else x.copy()


def _affine_rule(x: Aval, *wb, has_w, has_b):
    if x.ndim < 2:
        raise ShapeError(f"channel_affine: expected an (N, C, ...) input, got shape {x.shape}")
    for a in wb:
        if tuple(a.shape) != (x.shape[1],) or a.dtype is not x.dtype:
            raise ShapeError(f"channel_affine: a per-channel operand {a} does not fit an input {x}")
    return Aval(x.shape, x.dtype, x.device)


def _affine_form(x, *wb, has_w, has_b):
    """The forward as broadcast ops (compiled plans schedule it so: it fuses)."""
    from .shape import reshape
    view = _view(x)
    wb = list(wb)
    if has_w:
        x = x * reshape(wb.pop(0), view)
    if has_b:
        x = x + reshape(wb.pop(0), view)
    return x


def _always(*avals, **params) -> bool:
    return True


def _affine_vjp(g, out, x, *wb, has_w, has_b):
    c = x.shape[1]
    if not has_w:
        return (g, _part(bind(CHANNEL_AFFINE_BACKWARD, g, has_w=False, has_b=True), 0, c))
    rec = bind(CHANNEL_AFFINE_BACKWARD, g, x, wb[0], has_w=True, has_b=has_b)
    from .shape import reshape
    size = math.prod(x.shape)
    grads = (reshape(_part(rec, 0, size), tuple(x.shape)), _part(rec, size, c))
    return grads + ((_part(rec, size + c, c),) if has_b else ())


def _part(rec, start: int, length: int):
    from .indexing import getitem
    return getitem(rec, slice(start, start + length))


# ---------------------------------------------------------------- backward
def _channel_sums(xp, a3, b3=None):
    """(C,): the sums over N and L of an (N, C, L) array, or of its product with `b3`,
    without writing the products (einsum for numpy float32/float64)."""
    if xp is np and a3.dtype in _EINSUM and (b3 is None or b3.dtype == a3.dtype):
        return np.einsum("ncl->c", a3) if b3 is None else np.einsum("ncl,ncl->c", a3, b3)
    p = a3 if b3 is None else a3 * b3
    return p.sum(axis=2).sum(axis=0)


_EINSUM = (np.dtype(np.float32), np.dtype(np.float64))


def _backward_impl(xp, g, *xw, has_w, has_b):
    n, c = g.shape[0], g.shape[1]
    g3 = g.reshape(n, c, math.prod(g.shape[2:]))   # (not -1: an empty batch)
    if not has_w:
        return _channel_sums(xp, g3).astype(g.dtype, copy=False)
    x, w = xw
    size = g.size
    out = xp.empty(size + (2 if has_b else 1) * c, g.dtype)
    xp.multiply(g, w.reshape(_view(g)), out=out[:size].reshape(g.shape))
    out[size:size + c] = _channel_sums(xp, g3, x.reshape(g3.shape))
    if has_b:
        out[size + c:] = _channel_sums(xp, g3)
    return out


def _backward_rule(g: Aval, *xw, has_w, has_b):
    c = g.shape[1]
    if not has_w:
        return Aval((c,), g.dtype, g.device)
    return Aval((math.prod(g.shape) + (2 if has_b else 1) * c,), g.dtype, g.device)


def _backward_vjp(v, out, g, *xw, has_w, has_b):
    """VJP of ``(dx, dw, db) = (g * w, sum g * x, sum g)`` (sums over every dim but 1)
    for the cotangents (vx, vw, vb), the parts of `v`: d/dg = vx * w + vw * x + vb,
    d/dx = g * vw, d/dw = sum vx * g."""
    from .reductions import sum as _sum
    from .shape import expand, reshape
    c = g.shape[1]
    view = _view(g)
    dims = (0,) + tuple(range(2, g.ndim))
    if not has_w:
        return (expand(reshape(v, view), tuple(g.shape)),)
    x, w = xw
    size = math.prod(g.shape)
    vx = reshape(_part(v, 0, size), tuple(g.shape))
    vw = reshape(_part(v, size, c), view)
    d_g = vx * reshape(w, view) + x * vw
    if has_b:
        d_g = d_g + reshape(_part(v, size + c, c), view)
    return d_g, g * vw, _sum(vx * g, dims)


CHANNEL_AFFINE_BACKWARD = defprim("channel_affine_backward", _backward_impl, _backward_rule,
                                  _backward_vjp, kind="other",
                                  save=lambda rq: tuple(range(len(rq))))
CHANNEL_AFFINE = defprim("channel_affine", _affine_impl, _affine_rule, _affine_vjp, kind="other",
                         save=lambda rq: tuple(range(len(rq))),
                         extra={"rows_form": _affine_form, "rows_inline": _always})


def channel_affine(x, weight=None, bias=None):
    """``x * weight[c] + bias[c]`` along dim 1 of an (N, C, ...) `x` (either may be None;
    both (C,), of x's dtype)."""
    if weight is None and bias is None:
        return x
    wb = [t for t in (weight, bias) if t is not None]
    return bind(CHANNEL_AFFINE, x, *wb, has_w=weight is not None, has_b=bias is not None)
