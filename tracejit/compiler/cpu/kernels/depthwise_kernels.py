"""The CPU implementations of ops/depthwise.py's primitives: direct loops over planes.

A depthwise convolution does kh*kw multiply-adds per output; as columns and a GEMM per
channel (the grouped composite) each of them cost a copy into the columns and a tiny
product. Here one numba loop nest runs each (image, channel) plane, no columns made: per
kernel tap one run over the whole plane's outputs (at unit column stride a vector loop)
from a zero-padded copy of the plane made while it is in cache (`_PLANES`). The planes are independent,
so they are shared over the process's threads (runtime/sharepool.py):

- forward: an input plane into its m output channels' planes;
- input gradient: a plane of input channel ``c``, summed from its m output channels' planes
  (each input plane written by one share, no reduction between threads);
- weight gradient: an input channel's m filters, summed over the images.

The kernels are typed for C-contiguous float32/float64 operands; other operands are made
C-contiguous first. None (the numpy form runs) while a kernel is not loaded.
"""
from __future__ import annotations

import numpy as np

from ....ops.conv import conv_out_size
from ..runtime import sharepool as _sharepool
from .loader import kernel as _kernel, takes as _takes

__all__ = ["forward", "wgrad", "xgrad", "operands"]

# Each kernel's operand types: (in, filters or input, bias, result), then the geometry.
_SIGNATURES = {
    "forward": "{t}[:, :, :, ::1], {t}[:, ::1], {t}[::1], {t}[:, :, :, ::1]",
    "xgrad": "{t}[:, :, :, ::1], {t}[:, ::1], {t}[::1], {t}[:, :, :, ::1]",
    "wgrad": "{t}[:, :, :, ::1], {t}[:, :, :, ::1], {t}[::1], {t}[:, ::1]",
}
# (m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb) and the dtype's zero
_GEOMETRY = ", int64" * 12 + ", {t}"

# Shared by the three kernels as text. A plane is read through a zero-padded copy `pad`, flat,
# whose rows are `wp` long (the padded width rounded up to a multiple of the column
# stride), and its outputs are made in `wide`, rows `wr` = sh * wp / sw long: output (r, v)
# of a tap (a, e) is pad[a*dh*wp + e*dw + sw*(r*wr + v)], so a tap is one run over the
# whole plane (entries v >= OW of a wide row are spare, computed and discarded: at stride 2,
# three of four) rather than a short run per row, which cost as much in loop set-up as in
# multiply-adds (a 28-wide plane: 18 against 3.7 ms).
_PLANES = '''
@njit(inline='always')
def _layout(h, wd, sh, sw, ph, pw, kw, dw):
    wq = (wd + 2 * pw + sw - 1) // sw
    wp = wq * sw
    return wp, sh * wq, (h + 2 * ph + sh) * wp + (kw - 1) * dw + 1


@njit(inline='always')
def _fill(pad, plane, wp, ph, pw):
    for r in range(plane.shape[0]):
        prow = pad[(r + ph) * wp + pw:(r + ph) * wp + pw + plane.shape[1]]
        srow = plane[r]
        for v in range(plane.shape[1]):
            prow[v] = srow[v]


@njit(inline='always')
def _to_wide(wide, plane, wr):
    for r in range(plane.shape[0]):
        wrow = wide[r * wr:r * wr + plane.shape[1]]
        srow = plane[r]
        for v in range(plane.shape[1]):
            wrow[v] = srow[v]
'''

_FORWARD = '''
def kernel(x, w, b, out, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    \"\"\"Input planes [lo, hi) (plane q: image q // C, channel q % C) into their m output
    channels' planes of out (N, C*m, OH, OW).\"\"\"
    n, c, h, wd = x.shape
    oh, ow = out.shape[2], out.shape[3]
    wp, wr, size = _layout(h, wd, sh, sw, ph, pw, kw, dw)
    pad = np.zeros(size, x.dtype)
    wide = np.empty(oh * wr, x.dtype)
    cnt = oh * wr
    for q in range(lo, hi):
        i = q // c
        ch = q % c
        _fill(pad, x[i, ch], wp, ph, pw)
        for j in range(m):
            oc = ch * m + j
            init = b[oc] if hasb else zero
            for t in range(cnt):
                wide[t] = init
            for a in range(kh):
                for e in range(kw):
                    wv = w[oc, a * kw + e]
                    base = a * dh * wp + e * dw
                    if sw == 1:     # (a contiguous slice: a vector loop)
                        src_c = pad[base:base + cnt]
                        for t in range(cnt):
                            wide[t] += wv * src_c[t]
                    else:
                        src_s = pad[base:base + sw * cnt:sw]
                        for t in range(cnt):
                            wide[t] += wv * src_s[t]
            plane = out[i, oc]
            for r in range(oh):
                wrow = wide[r * wr:r * wr + ow]
                orow = plane[r]
                for v in range(ow):
                    orow[v] = wrow[v]
'''

_XGRAD = '''
def kernel(g, w, b, dx, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    \"\"\"Planes [lo, hi) of dx (N, C, H, W), plane q = image q // C, channel q % C: its m
    output channels' gradients through their filters, summed (b unused).\"\"\"
    n, c, h, wd = dx.shape
    oh = g.shape[2]
    wp, wr, size = _layout(h, wd, sh, sw, ph, pw, kw, dw)
    gpad = np.empty(size, g.dtype)
    wide = np.zeros(oh * wr, g.dtype)     # (its spare columns stay zero: they add nothing)
    cnt = oh * wr
    for q in range(lo, hi):
        i = q // c
        ch = q % c
        for t in range(size):
            gpad[t] = zero
        for j in range(m):
            oc = ch * m + j
            _to_wide(wide, g[i, oc], wr)
            for a in range(kh):
                for e in range(kw):
                    wv = w[oc, a * kw + e]
                    base = a * dh * wp + e * dw
                    if sw == 1:
                        dst_c = gpad[base:base + cnt]
                        for t in range(cnt):
                            dst_c[t] += wv * wide[t]
                    else:
                        dst_s = gpad[base:base + sw * cnt:sw]
                        for t in range(cnt):
                            dst_s[t] += wv * wide[t]
        plane = dx[i, ch]
        for r in range(h):
            prow = gpad[(r + ph) * wp + pw:(r + ph) * wp + pw + wd]
            drow = plane[r]
            for v in range(wd):
                drow[v] = prow[v]
'''

_WGRAD = '''
def kernel(g, x, b, dwt, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    \"\"\"The m filters of input channels [lo, hi) in dwt (C*m, kh*kw): each tap's products
    of the output gradient's plane and the input's, summed over the images (b unused).\"\"\"
    n, c, h, wd = x.shape
    oh = g.shape[2]
    wp, wr, size = _layout(h, wd, sh, sw, ph, pw, kw, dw)
    pad = np.zeros(size, x.dtype)
    wide = np.zeros(oh * wr, x.dtype)     # (spare columns zero: they add nothing)
    cnt = oh * wr
    for ch in range(lo, hi):
        for j in range(m):
            for t in range(kh * kw):
                dwt[ch * m + j, t] = zero
        for i in range(n):
            _fill(pad, x[i, ch], wp, ph, pw)
            for j in range(m):
                oc = ch * m + j
                _to_wide(wide, g[i, oc], wr)
                for a in range(kh):
                    for e in range(kw):
                        base = a * dh * wp + e * dw
                        acc = zero
                        if sw == 1:
                            src_c = pad[base:base + cnt]
                            for t in range(cnt):
                                acc += wide[t] * src_c[t]
                        else:
                            src_s = pad[base:base + sw * cnt:sw]
                            for t in range(cnt):
                                acc += wide[t] * src_s[t]
                        dwt[oc, a * kw + e] += acc
'''

_BODIES = {"forward": _FORWARD, "xgrad": _XGRAD, "wgrad": _WGRAD}


def _source(which: str, dtype: str) -> str:
    signature = f"void({_SIGNATURES[which]}{_GEOMETRY})".replace("{t}", dtype)
    # (a sum's order is free in the weight gradient's inner loop, so it vectorizes)
    math = ", fastmath={'reassoc'}" if which == "wgrad" else ""
    return ("import numpy as np\nfrom numba import njit\n\n" + _PLANES
            + f'\n\n@njit("{signature}", cache=CACHE, error_model="numpy", boundscheck=False, '
            + f"nogil=True{math})" + _BODIES[which])


def _loaded(which: str, dtype):
    if dtype not in (np.float32, np.float64):
        return None
    name = np.dtype(dtype).name
    return _kernel(("depthwise", which, name), lambda: _source(which, name)).get()


def operands(*arrays, **params) -> bool:
    """The implementations' checker: every operand a numpy array of one float dtype."""
    return _takes(np, *arrays)


def _run(fn, args: tuple, count: int, work: int) -> None:
    """``fn(*args, lo, hi, ...)`` over planes [0, count) shared over the threads."""
    head, tail = args[:-2], args[-2:]
    _sharepool.split(lambda lo, hi: fn(*head, lo, hi, *tail), count, work)


def _geo(kernel, stride, padding, dilation) -> tuple:
    return (int(kernel[0]), int(kernel[1]), int(stride[0]), int(stride[1]), int(padding[0]),
            int(padding[1]), int(dilation[0]), int(dilation[1]))


def forward(x, w, *b, kernel, stride, padding, dilation):
    fn = _loaded("forward", x.dtype)
    if fn is None:
        return None
    n, c, h, wd = x.shape
    o = w.shape[0]
    oh = conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = conv_out_size(wd, kernel[1], stride[1], padding[1], dilation[1])
    out = np.empty((n, o, oh, ow), x.dtype)
    bias = np.ascontiguousarray(b[0]) if b else np.zeros(1, x.dtype)
    args = (np.ascontiguousarray(x), np.ascontiguousarray(w.reshape(o, -1)), bias, out, o // c,
            *_geo(kernel, stride, padding, dilation), int(bool(b)), x.dtype.type(0))
    _run(fn, args, n * c, n * o * oh * ow * kernel[0] * kernel[1])
    return out


def xgrad(g, w, input_hw, channels, kernel, stride, padding, dilation):
    fn = _loaded("xgrad", g.dtype)
    if fn is None:
        return None
    n, o, oh, ow = g.shape
    c = int(channels)
    dx = np.empty((n, c) + tuple(int(s) for s in input_hw), g.dtype)
    args = (np.ascontiguousarray(g), np.ascontiguousarray(w.reshape(o, -1)), np.zeros(1, g.dtype), dx,
            o // c, *_geo(kernel, stride, padding, dilation), 0, g.dtype.type(0))
    _run(fn, args, n * c, n * o * oh * ow * kernel[0] * kernel[1])
    return dx


def wgrad(g, x, kernel, stride, padding, dilation):
    fn = _loaded("wgrad", x.dtype)
    if fn is None:
        return None
    n, c = x.shape[:2]
    o, oh, ow = g.shape[1:]
    dwt = np.empty((o, kernel[0] * kernel[1]), x.dtype)
    args = (np.ascontiguousarray(g), np.ascontiguousarray(x), np.zeros(1, x.dtype), dwt, o // c,
            *_geo(kernel, stride, padding, dilation), 0, x.dtype.type(0))
    _run(fn, args, c, n * o * oh * ow * kernel[0] * kernel[1])
    return dwt.reshape((o, 1) + tuple(kernel))
