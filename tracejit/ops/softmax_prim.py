"""Softmax as one primitive, and its input gradient as another: the one definition of
the op, eager and captured.

Why: as a composite (``e = exp(x - amax(x)); e / sum(e)``) an eager softmax is five op
calls forward and, through their VJPs, about ten full-size passes backward (the
division's two-operand rule, the broadcast sum, exp's product, ...). In the Transformer
encoder step (batch 16, 4 heads, 128x128 scores: 1M elements) softmax forward+backward
took 20 ms against PyTorch's 5.7 (one thread). As a primitive the forward is one row
kernel over the last dim (ops/row_kernels.py: max, exp and sum while the row is in
cache, then the division) or, for other dims, array modules and dtypes, the same numpy
passes in place; the backward is ``y * (g - sum(g * y))``, one kernel or four passes.

Traced programs record these same primitives (compiled plans call these
implementations: a captured softmax used to be the composite, three fused groups and a
numpy max forward, two groups backward). ``softmax_backward``'s own VJP (second
derivatives) is written with tracejit ops.
"""
from __future__ import annotations

from ..errors import DTypeError
from .registry import Aval, bind, defprim
from .reductions import sum as _sum
from .row_kernels import softmax_backward_rows, softmax_rows

__all__ = ["softmax", "softmax_backward"]


def _softmax_impl(xp, x, dim):
    if dim == x.ndim - 1:
        out = softmax_rows(xp, x)
        if out is not None:
            return out
    e = x - x.max(axis=dim, keepdims=True)
    xp.exp(e, out=e)
    e /= e.sum(axis=dim, keepdims=True)
    return e


def _rule(x: Aval, dim):
    if not x.dtype.is_floating_point:
        raise DTypeError(f"softmax: expected a floating point tensor, got {x.dtype.name}")
    return Aval(x.shape, x.dtype, x.device)


def _softmax_vjp(g, out, x, dim):
    return (softmax_backward(g, out, dim),)


SOFTMAX = defprim("softmax", _softmax_impl, _rule, _softmax_vjp, kind="other",
                  save=lambda rq: (), save_out=True, grad_name="SoftmaxBackward0")


def _softmax_backward_impl(xp, g, y, dim):
    if dim == y.ndim - 1:
        out = softmax_backward_rows(xp, g, y)
        if out is not None:
            return out
    gy = g * y
    out = g - gy.sum(axis=dim, keepdims=True)
    out *= y
    return out


def _softmax_backward_rule(g: Aval, y: Aval, dim):
    return Aval(y.shape, y.dtype, y.device)


def _softmax_backward_vjp(v, out, g, y, dim):
    # B(g, y) = y * (g - <g, y>) along dim:  v^T dB/dg = y * (v - <v, y>) = B(v, y);
    # v^T dB/dy = v * (g - <g, y>) - g * <v, y>.
    d_g = softmax_backward(v, y, dim) if g is not None else None
    d_y = None
    if y is not None and g is not None:
        d_y = v * (g - _sum(g * y, dim, keepdim=True)) - g * _sum(v * y, dim, keepdim=True)
    return d_g, d_y


SOFTMAX_BACKWARD = defprim("softmax_backward", _softmax_backward_impl, _softmax_backward_rule,
                           _softmax_backward_vjp, kind="other", save=lambda rq: (0, 1),
                           grad_name="SoftmaxBackwardDataBackward0")


def softmax(x, dim: int):
    """softmax of `x` along `dim` (a normalized, non-negative dim index)."""
    return bind(SOFTMAX, x, dim=dim)


def softmax_backward(g, y, dim: int):
    """``y * (g - sum(g * y, dim))``: softmax's input gradient for output `y`, output gradient `g`."""
    return bind(SOFTMAX_BACKWARD, g, y, dim=dim)
