"""A depthwise convolution (groups == input channels) and its two gradients as three
primitives, each the others' VJP, so a backend runs each as a direct loop over the
(image, channel) planes, reading the input in place: no columns (im2col) and no col2im,
which for a depthwise layer cost far more than its kh*kw multiply-adds per output.

- ``depthwise_conv2d(x, w[, b])``: (N, C, H, W) by (C*m, 1, kh, kw) -> (N, C*m, OH, OW),
  output channel ``c*m + j`` the input channel c's convolution with filter ``c*m + j``
  (PyTorch's grouping for ``groups=C``, channel multiplier m), plus the bias b (C*m,);
- ``depthwise_wgrad(g, x)``: the weight's gradient (C*m, 1, kh, kw);
- ``depthwise_xgrad(g, w)``: the input's gradient (N, C, *input_hw).

Their numpy forms, one strided slice of the padded input per kernel tap, are the
reference every backend implementation matches.
"""
from __future__ import annotations

from ..errors import ShapeError
from .conv import _padded, _windows
from .conv_gemm import (_EXTRA, _check as _check_geometry, _geometry, _meta, _out_hw, _saves,  # (conv2d_gemm's)
                         as_2d, CONV_BGRAD)
from .eager import bind
from .registry import Aval, defprim

__all__ = ["depthwise_conv2d", "depthwise_wgrad", "depthwise_xgrad", "DEPTHWISE_CONV2D",
           "DEPTHWISE_WGRAD", "DEPTHWISE_XGRAD"]


def _check(op: str, g, x_shape, o: int, kernel, stride, padding, dilation) -> None:
    if o % x_shape[1]:
        raise ShapeError(f"{op}: {o} output channels are no multiple of the input's {x_shape[1]}")
    _check_geometry(op, g, x_shape, o, kernel, stride, padding, dilation)


# ---------------------------------------------------------------- forward
def _fwd_rule(x: Aval, w: Aval, *b: Aval, kernel, stride, padding, dilation):
    if x.ndim != 4 or w.ndim != 4 or w.shape[1] != 1 or tuple(w.shape[2:]) != tuple(kernel):
        raise ShapeError(f"depthwise_conv2d: input {tuple(x.shape)} and weight {tuple(w.shape)} do not "
                         f"fit kernel {tuple(kernel)} (weight (C*m, 1, kh, kw))")
    if b and tuple(b[0].shape) != (w.shape[0],):
        raise ShapeError(f"depthwise_conv2d: bias of shape {tuple(b[0].shape)} should be ({w.shape[0]},)")
    _check("depthwise_conv2d", None, x.shape, w.shape[0], kernel, stride, padding, dilation)
    return Aval((x.shape[0], w.shape[0]) + _out_hw(x.shape[2], x.shape[3], kernel, stride, padding,
                                                    dilation), x.dtype, x.device)


def _fwd_impl(xp, x, w, *b, kernel, stride, padding, dilation):
    n, c = x.shape[:2]
    o = w.shape[0]
    m = o // c
    oh, ow = _out_hw(x.shape[2], x.shape[3], kernel, stride, padding, dilation)
    xpad = _padded(xp, x, padding)
    wr = w.reshape((c, m) + tuple(kernel))
    out = xp.zeros((n, c, m, oh, ow), dtype=x.dtype)
    for i, j, rows, cols in _windows(kernel, stride, dilation, oh, ow):
        out += xpad[:, :, None, rows, cols] * wr[None, :, :, i, j, None, None]
    out = out.reshape(n, o, oh, ow)
    if b:
        out += b[0].reshape(1, o, 1, 1)
    return out


def _fwd_vjp(g, out, x, w, *b, kernel, stride, padding, dilation, needs=None):
    needs = needs or (True,) * (2 + len(b))
    geo = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    xgeo = dict(geo, input_hw=tuple(x.shape[2:]), channels=x.shape[1])
    gx = bind(DEPTHWISE_XGRAD, g, w, **xgeo) if needs[0] else None
    gw = bind(DEPTHWISE_WGRAD, g, x, **geo) if needs[1] else None
    if not b:
        return gx, gw
    return gx, gw, (bind(CONV_BGRAD, g) if needs[2] else None)


# ---------------------------------------------------------------- weight gradient
def _wgrad_rule(g: Aval, x: Aval, kernel, stride, padding, dilation):
    if g.ndim != 4 or x.ndim != 4:
        raise ShapeError(f"depthwise_wgrad: expected 4-D gradient and input, got {tuple(g.shape)} and "
                         f"{tuple(x.shape)}")
    _check("depthwise_wgrad", g, x.shape, g.shape[1], kernel, stride, padding, dilation)
    return Aval((g.shape[1], 1) + tuple(kernel), x.dtype, x.device)


def _wgrad_impl(xp, g, x, kernel, stride, padding, dilation):
    n, c = x.shape[:2]
    o, oh, ow = g.shape[1:]
    m = o // c
    xpad = _padded(xp, x, padding)
    gr = g.reshape(n, c, m, oh, ow)
    dw = xp.empty((c, m) + tuple(kernel), dtype=x.dtype)
    for i, j, rows, cols in _windows(kernel, stride, dilation, oh, ow):
        dw[:, :, i, j] = xp.einsum("nchw,ncmhw->cm", xpad[:, :, rows, cols], gr)
    return dw.reshape((o, 1) + tuple(kernel))


def _wgrad_vjp(u, out, g, x, kernel, stride, padding, dilation, needs=(True, True)):
    geo = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    gg = bind(DEPTHWISE_CONV2D, x, u, **geo) if needs[0] else None
    xgeo = dict(geo, input_hw=tuple(x.shape[2:]), channels=x.shape[1])
    gx = bind(DEPTHWISE_XGRAD, g, u, **xgeo) if needs[1] else None
    return gg, gx


# ---------------------------------------------------------------- input gradient
def _xgrad_rule(g: Aval, w: Aval, input_hw, channels, kernel, stride, padding, dilation):
    if g.ndim != 4 or w.ndim != 4 or w.shape[1] != 1 or g.shape[1] != w.shape[0]:
        raise ShapeError(f"depthwise_xgrad: gradient {tuple(g.shape)} does not fit weight {tuple(w.shape)}")
    shape = (g.shape[0], channels) + tuple(input_hw)
    _check("depthwise_xgrad", g, shape, w.shape[0], kernel, stride, padding, dilation)
    return Aval(shape, g.dtype, g.device)


def _xgrad_impl(xp, g, w, input_hw, channels, kernel, stride, padding, dilation):
    n, o, oh, ow = g.shape
    c, m = channels, o // channels
    h, wd = input_hw
    ph, pw = padding
    dxpad = xp.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=g.dtype)
    gr = g.reshape(n, c, m, oh, ow)
    wr = w.reshape((c, m) + tuple(kernel))
    for i, j, rows, cols in _windows(kernel, stride, dilation, oh, ow):
        part = gr * wr[None, :, :, i, j, None, None]
        dxpad[:, :, rows, cols] += part[:, :, 0] if m == 1 else part.sum(2)
    return xp.ascontiguousarray(dxpad[:, :, ph:ph + h, pw:pw + wd])


def _xgrad_vjp(u, out, g, w, input_hw, channels, kernel, stride, padding, dilation, needs=(True, True)):
    geo = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    gg = bind(DEPTHWISE_CONV2D, u, w, **geo) if needs[0] else None
    gw = bind(DEPTHWISE_WGRAD, g, u, **geo) if needs[1] else None
    return gg, gw


DEPTHWISE_CONV2D = defprim("depthwise_conv2d", as_2d(_fwd_impl, 1), as_2d(_fwd_rule), _fwd_vjp, kind="other",
                           save=_saves,
                           grad_name="ConvolutionBackward0", extra=dict(_EXTRA, meta=_meta(0)))
DEPTHWISE_WGRAD = defprim("depthwise_wgrad", as_2d(_wgrad_impl, 1), as_2d(_wgrad_rule), _wgrad_vjp, kind="other",
                          save=_saves, extra=dict(_EXTRA, meta=_meta(1)))
DEPTHWISE_XGRAD = defprim("depthwise_xgrad", as_2d(_xgrad_impl, 1), as_2d(_xgrad_rule), _xgrad_vjp, kind="other",
                          save=_saves, extra=dict(_EXTRA))


def depthwise_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1):
    """The depthwise convolution of x (N, C, H, W) with w (C*m, 1, kh, kw): conv2d with
    ``groups=C``, plus the bias (C*m,) if given (of x's dtype); in one dimension of x
    (N, C, L) with w (C*m, 1, k)."""
    b = () if bias is None else (bias,)
    return bind(DEPTHWISE_CONV2D, x, w, *b, kernel=tuple(int(k) for k in w.shape[2:]),
                **_geometry(stride, padding, dilation, nd=w.ndim - 2))


def depthwise_wgrad(g, x, kernel, stride=1, padding=0, dilation=1):
    """The gradient of `depthwise_conv2d`'s weight (C*m, 1, kh, kw) for output gradient g."""
    return bind(DEPTHWISE_WGRAD, g, x, kernel=tuple(int(k) for k in kernel),
                **_geometry(stride, padding, dilation))


def depthwise_xgrad(g, w, input_shape, stride=1, padding=0, dilation=1):
    """The gradient of `depthwise_conv2d`'s input (N, *input_shape), input_shape (C, H, W),
    for output gradient g."""
    c, h, wd = (int(s) for s in input_shape)
    return bind(DEPTHWISE_XGRAD, g, w, input_hw=(h, wd), channels=c,
                kernel=tuple(int(k) for k in w.shape[2:]), **_geometry(stride, padding, dilation))
