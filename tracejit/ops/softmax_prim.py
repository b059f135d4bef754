"""Softmax as one primitive, and its input gradient as another: the one definition of
the op, eager and captured.

Why: as a composite an eager softmax is five op calls forward and about ten full-size
passes backward (3.5x PyTorch's time on attention scores). As a primitive its numpy form
is a few passes in place. Over the last dim the CPU backend runs a kernel rendered from
each primitive's *rows form* (``extra["rows_form"]``): max, exp and sum while the row is in
cache, then the division; the backward is ``y * (g - sum(g * y))``. Over a dim before the
last the same rows forms run in lanes, in place (compiler/codegen_cpu_lanes.py). Compiled plans
schedule the rows form in the primitive's place, so elementwise work around it joins its
kernel. ``softmax_backward``'s own VJP is written with tracejit ops.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError, UnsupportedDTypeError
from .registry import Aval, defprim, shift_dims
from .eager import bind
from .elementwise import exp as _exp
from .reductions import amax as _amax, sum as _sum

__all__ = ["softmax", "softmax_backward"]


def _softmax_impl(xp, x, *mask, dim, scale=1.0):
    return softmax_passes(xp, x, mask[0] if mask else None, dim, scale)


def softmax_passes(xp, x, m, dim: int, scale: float):
    """softmax's numpy form (mask `m` or None), also attention's while its kernel is on its way."""
    if scale != 1.0 or m is not None:
        x = x * x.dtype.type(scale) if scale != 1.0 else x.copy()
        if m is not None:
            x += m
        e = x
        e -= x.max(axis=dim, keepdims=True)
    else:
        e = x - x.max(axis=dim, keepdims=True)
    xp.exp(e, out=e)
    e /= e.sum(axis=dim, keepdims=True)
    return e


def _rule(x: Aval, *mask, dim, scale=1.0):
    if not x.dtype.is_floating_point:
        raise UnsupportedDTypeError(f"softmax: expected a floating point tensor, got {x.dtype.name}")
    if mask:
        m = mask[0]
        if m.dtype is not x.dtype:
            raise DTypeError(f"softmax: the additive mask has dtype {m.dtype.name}, the scores "
                             f"{x.dtype.name}")
        shape = tuple(x.shape)
        ms = (1,) * (len(shape) - len(m.shape)) + tuple(m.shape)
        if len(m.shape) > len(shape) or any(a != 1 and a != b for a, b in zip(ms, shape)):
            raise ShapeError(f"softmax: an additive mask of shape {tuple(m.shape)} does not "
                             f"broadcast to the scores' shape {shape}")
    return Aval(x.shape, x.dtype, x.device)


def _softmax_vjp(g, out, x, *mask, dim, scale=1.0):
    # y = softmax(x * scale + mask): dx = scale * B(g, y), dmask = B(g, y) (summed to the
    # mask's shape by the engine); the mask reaches here only when it needs a gradient
    d_x = softmax_backward(g, out, dim, scale)
    if not mask or mask[0] is None:
        return (d_x,) + ((None,) if mask else ())
    return d_x, (d_x if scale == 1.0 else softmax_backward(g, out, dim))


def on_last_dim(x, *rest, dim, **params) -> bool:
    """The op reduces over the last dim of `x` (an Aval or an array), as a rows group does:
    compiled plans schedule the rows form in its place (compiler/rowinline.py), and the CPU
    backend's kernel is rendered from it (a checker, ops/impls.py)."""
    return dim == len(x.shape) - 1


def _softmax_rows(x, *mask, dim, scale=1.0):
    # the numpy form's steps, in its order (over the last dim: `dim` is checked by the caller)
    z = x * scale if scale != 1.0 else x
    if mask:
        z = z + mask[0]
    e = _exp(z - _amax(z, -1, keepdim=True))
    return e / _sum(e, -1, keepdim=True)


SOFTMAX = defprim("softmax", _softmax_impl, _rule, _softmax_vjp, kind="other",
                  save=lambda rq: (1,) if len(rq) > 1 and rq[1] else (), save_out=True,
                  grad_name="SoftmaxBackward0",
                  extra={"rows_form": _softmax_rows, "rows_inline": on_last_dim, "batch": shift_dims,
                         "row_major": True})


def _softmax_backward_impl(xp, g, y, dim, scale=1.0):
    return softmax_backward_passes(xp, g, y, dim, scale)


def softmax_backward_passes(xp, g, y, dim: int, scale: float):
    """softmax's backward in numpy (as `softmax_passes`)."""
    gy = g * y
    out = g - gy.sum(axis=dim, keepdims=True)
    out *= y
    if scale != 1.0:
        out *= out.dtype.type(scale)
    return out


def _softmax_backward_vjp(v, out, g, y, dim, scale=1.0):
    # B(g, y) = scale * y * (g - <g, y>) along dim:  v^T dB/dg = B(v, y);
    # v^T dB/dy = scale * (v * (g - <g, y>) - g * <v, y>).
    d_g = softmax_backward(v, y, dim, scale) if g is not None else None
    d_y = None
    if y is not None and g is not None:
        d_y = v * (g - _sum(g * y, dim, keepdim=True)) - g * _sum(v * y, dim, keepdim=True)
        if scale != 1.0:
            d_y = d_y * scale
    return d_g, d_y


def _softmax_backward_rows(g, y, dim, scale=1.0):
    out = (g - _sum(g * y, -1, keepdim=True)) * y
    return out * scale if scale != 1.0 else out


SOFTMAX_BACKWARD = defprim("softmax_backward", _softmax_backward_impl,
                           lambda g, y, dim, scale=1.0: Aval(y.shape, y.dtype, y.device),
                           _softmax_backward_vjp, kind="other", save=lambda rq: (0, 1),
                           grad_name="SoftmaxBackwardDataBackward0",
                           extra={"rows_form": _softmax_backward_rows, "rows_inline": on_last_dim, "batch": shift_dims})


def softmax(x, dim: int, scale: float = 1.0, mask=None):
    """softmax of ``x * scale + mask`` along `dim` (a normalized, non-negative dim index):
    attention's scale and additive mask (0 / -inf, or any float bias broadcasting to x, of
    x's dtype) in the same pass as the normalization."""
    if mask is None:
        return bind(SOFTMAX, x, dim=dim, scale=float(scale)) if scale != 1.0 else bind(SOFTMAX, x, dim=dim)
    return bind(SOFTMAX, x, mask, dim=dim, scale=float(scale))


def softmax_backward(g, y, dim: int, scale: float = 1.0):
    """``scale * y * (g - sum(g * y, dim))``: the input gradient of ``softmax(x * scale)`` for
    output `y`, output gradient `g`."""
    if scale != 1.0:
        return bind(SOFTMAX_BACKWARD, g, y, dim=dim, scale=float(scale))
    return bind(SOFTMAX_BACKWARD, g, y, dim=dim)
