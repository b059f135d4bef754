"""Max and average pooling as primitives over the kh*kw window offsets.

Why primitives: the ``unfold`` + reduce composite copied every window into a column array
and folded another back in its backward. Here each window offset (i, j) is a strided view
of the (padded) input of the output's shape, so the forward is kh*kw vectorized passes
and the backward adds the output gradient into the same views (overlapping windows add).

Max-pooling's gradient goes to the *first* maximum of each window in row-major order, as
PyTorch's: floating inputs take the record of first-maximum offsets (ops/pool_offsets.py);
`max_pool2d` here serves the integer dtypes (``return_indices``: ops/pooling_nd.py).
Known edge: a window whose real entries are all -inf and that starts in the padding keeps
its gradient on the padding (dropped) where PyTorch gives it to the first real entry.

The CPU backend registers one loop over the windows for float32/float64
(compiler/cpu/kernels/window_forms.py, same rules).
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, ShapeError
from .conv import _out_hw, _padded, _windows
from .registry import Aval, defprim
from .eager import bind

__all__ = ["max_pool2d", "avg_pool2d", "avg_pool2d_backward"]


# ---------------------------------------------------------------- helpers
def _pool_rule(name):
    def rule(x, kernel, stride, padding, dilation):
        if x.ndim != 4:
            raise ShapeError(f"{name}: expected a 4-D input (N, C, H, W), got shape {x.shape}")
        if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
            raise ArgumentError(f"{name}: padding {padding} should be at most half of kernel size "
                             f"{kernel}")
        n, c, h, w = x.shape
        oh, ow = _out_hw(h, w, kernel, stride, padding, dilation)
        if oh <= 0 or ow <= 0:
            raise ShapeError(f"{name}: kernel {kernel} with padding {padding} and dilation "
                             f"{dilation} is larger than the input of spatial size ({h}, {w})")
        return Aval((n, c, oh, ow), x.dtype, x.device)
    return rule


def _fill_low(dtype):
    """The padding value that never wins a max: -inf, or the integer dtype's minimum."""
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _views(a, kernel, stride, dilation, oh, ow):
    """The strided view of `a` (padded input or its gradient) for each window offset."""
    for _, _, rs, cs in _windows(kernel, stride, dilation, oh, ow):
        yield a[:, :, rs, cs]


def _window_fold(xp, x, kernel, stride, padding, dilation, fill, combine):
    """Every window of `x` (padded with `fill`) folded offset by offset with the ufunc
    `combine` (maximum, add), into a copy of the first offset's view."""
    oh, ow = _out_hw(x.shape[2], x.shape[3], kernel, stride, padding, dilation)
    views = _views(_padded(xp, x, padding, fill), kernel, stride, dilation, oh, ow)
    out = next(views).copy()
    for v in views:
        combine(out, v, out=out)   # (maximum propagates NaN, as PyTorch's max_pool2d)
    return out


# ---------------------------------------------------------------- max_pool2d
def _max_pool_impl(xp, x, kernel, stride, padding, dilation):
    return _window_fold(xp, x, kernel, stride, padding, dilation, _fill_low(x.dtype), xp.maximum)


def _max_pool_vjp(g, out, x, kernel, stride, padding, dilation):
    # The gradient of the record path (ops/pool_offsets.py): g scattered at each window's
    # first maximum, recorded from x again, for the floating inputs whose window offsets
    # x's dtype holds (the composite takes the record itself for those, and pools other
    # floating inputs in float32: ops/composite.py `max_pool2d`)
    from . import pool_offsets as O
    if not O.applies(x, kernel):
        raise NotImplementedError(f"max_pool2d: no gradient for {x.dtype.name} windows of "
                                  f"{kernel[0] * kernel[1]} positions; use F.max_pool2d")
    rec = O.max_pool2d_with_offsets(x, kernel, stride, padding, dilation)
    return (O.max_pool2d_scatter(g, rec, tuple(x.shape), kernel, stride, padding, dilation),)


MAX_POOL2D = defprim("max_pool2d", _max_pool_impl, _pool_rule("max_pool2d"), _max_pool_vjp,
                     kind="other", save=lambda rq: (0,), extra={"selects": True},
                     grad_name="MaxPool2DWithIndicesBackward0")


# ---------------------------------------------------------------- avg_pool2d
# The simple path only (count_include_pad=True, no divisor_override, floor mode): every
# window divides by kh*kw, padding counts as zeros.
def _avg_pool_impl(xp, x, kernel, stride, padding, dilation):
    out = _window_fold(xp, x, kernel, stride, padding, dilation, 0, xp.add)
    out *= out.dtype.type(1.0 / (kernel[0] * kernel[1]))
    return out


def _avg_pool_vjp(g, out, x, kernel, stride, padding, dilation):
    return (avg_pool2d_backward(g, tuple(x.shape), kernel, stride, padding, dilation),)


def _avg_pool_backward_rule(g, input_shape, kernel, stride, padding, dilation):
    expect = _pool_rule("avg_pool2d_backward")(Aval(input_shape, g.dtype, g.device), kernel,
                                               stride, padding, dilation)
    if tuple(g.shape) != expect.shape:
        raise ShapeError(f"avg_pool2d_backward: gradient shape {tuple(g.shape)} does not match "
                         f"the pooled output shape {expect.shape}")
    return Aval(input_shape, g.dtype, g.device)


def _avg_pool_backward_impl(xp, g, input_shape, kernel, stride, padding, dilation):
    n, c, h, w = input_shape
    ph, pw = padding
    oh, ow = _out_hw(h, w, kernel, stride, padding, dilation)
    gs = g * g.dtype.type(1.0 / (kernel[0] * kernel[1]))
    gx = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=g.dtype)
    for view in _views(gx, kernel, stride, dilation, oh, ow):
        view += gs
    return gx[:, :, ph:ph + h, pw:pw + w] if (ph or pw) else gx


AVG_POOL2D = defprim("avg_pool2d", _avg_pool_impl, _pool_rule("avg_pool2d"), _avg_pool_vjp,
                     kind="other", save=lambda rq: (), extra={"meta": (0,)},
                     grad_name="AvgPool2DBackward0")
AVG_POOL2D_BACKWARD = defprim("avg_pool2d_backward", _avg_pool_backward_impl,
                              _avg_pool_backward_rule,
                              lambda gg, out, g, input_shape, **geo: (avg_pool2d(gg, **geo),),
                              kind="other", save=lambda rq: (),
                              grad_name="AvgPool2DBackwardBackward0")


# ---------------------------------------------------------------- public functions
def max_pool2d(x, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """Max over each (dilated) window of a 4-D input; params are (h, w) int pairs."""
    return bind(MAX_POOL2D, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)


def avg_pool2d(x, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """Mean over each window, padding counted as zeros (avg_pool2d's default path)."""
    return bind(AVG_POOL2D, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)


def avg_pool2d_backward(g, input_shape, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """The input gradient of `avg_pool2d`: ``g / (kh*kw)`` added into every window."""
    return bind(AVG_POOL2D_BACKWARD, g, input_shape=tuple(input_shape), kernel=kernel,
                stride=stride, padding=padding, dilation=dilation)
