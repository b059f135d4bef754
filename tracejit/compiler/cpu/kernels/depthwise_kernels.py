"""The CPU implementations of ops/depthwise.py's primitives: direct loops over planes.

A depthwise convolution does kh*kw multiply-adds per output; as columns and a GEMM per
channel (the grouped composite) each of them cost a copy into the columns and a tiny
product. Here one numba loop nest runs each (image, channel) plane from the input in place:
per output row and kernel tap one run over the row's outputs (unit stride: a vector loop),
the taps' reach cut at the padding instead of reading a padded copy. The planes are
independent, so they are shared over the process's threads (runtime/sharepool.py):

- forward: a plane of output channel ``o`` from input channel ``o // m``;
- input gradient: a plane of input channel ``c``, summed from its m output channels' planes
  (each input plane written by one share, no reduction between threads);
- weight gradient: a filter ``o`` summed over the images (one share per filter).

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

# The valid outputs of a tap along one axis: output q reads input q*s - p + k*d, in [0, n)
# for q in [lo, hi). (Shared by the three kernels as text.)
_RANGE = '''
def _span(n, nout, s, p, off):
    lo = 0
    if off < p:
        lo = (p - off + s - 1) // s
    hi = (n - 1 + p - off) // s + 1 if n - 1 + p - off >= 0 else 0
    if hi > nout:
        hi = nout
    if hi < lo:
        hi = lo
    return lo, hi
'''

_FORWARD = '''
def kernel(x, w, b, out, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    """Planes [lo, hi) of out (N, O, OH, OW), plane q = image q // O, channel q % O."""
    n, c, h, wd = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    for q in range(lo, hi):
        i = q // o
        oc = q % o
        xc = x[i, oc // m]
        dst = out[i, oc]
        init = b[oc] if hasb else zero
        for r in range(oh):
            row = dst[r]
            for v in range(ow):
                row[v] = init
            for a in range(kh):
                ih = r * sh - ph + a * dh
                if ih < 0 or ih >= h:
                    continue
                src = xc[ih]
                for e in range(kw):
                    off = e * dw
                    v0, v1 = _span(wd, ow, sw, pw, off)
                    wv = w[oc, a * kw + e]
                    base = off - pw
                    dst_s = row[v0:v1]
                    if sw == 1:     # (a contiguous slice: a vector loop)
                        src_c = src[v0 + base:v1 + base]
                        for v in range(v1 - v0):
                            dst_s[v] += wv * src_c[v]
                    else:
                        src_s = src[v0 * sw + base:(v1 - 1) * sw + base + 1:sw]
                        for v in range(v1 - v0):
                            dst_s[v] += wv * src_s[v]
'''

_XGRAD = '''
def kernel(g, w, b, dx, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    """Planes [lo, hi) of dx (N, C, H, W), plane q = image q // C, channel q % C: the sum
    of its m output channels' gradients through their filters (b unused)."""
    n, c, h, wd = dx.shape
    oh, ow = g.shape[2], g.shape[3]
    for q in range(lo, hi):
        i = q // c
        ch = q % c
        dst = dx[i, ch]
        for r in range(h):
            for v in range(wd):
                dst[r, v] = zero
        for j in range(m):
            oc = ch * m + j
            gc = g[i, oc]
            for r in range(oh):
                grow = gc[r]
                for a in range(kh):
                    ih = r * sh - ph + a * dh
                    if ih < 0 or ih >= h:
                        continue
                    row = dst[ih]
                    for e in range(kw):
                        off = e * dw
                        v0, v1 = _span(wd, ow, sw, pw, off)
                        wv = w[oc, a * kw + e]
                        base = off - pw
                        src_s = grow[v0:v1]
                        if sw == 1:
                            dst_c = row[v0 + base:v1 + base]
                            for v in range(v1 - v0):
                                dst_c[v] += wv * src_s[v]
                        else:
                            dst_s = row[v0 * sw + base:(v1 - 1) * sw + base + 1:sw]
                            for v in range(v1 - v0):
                                dst_s[v] += wv * src_s[v]
'''

_WGRAD = '''
def kernel(g, x, b, dwt, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    """Filters [lo, hi) of dwt (O, kh*kw): each tap's products of g's plane and the input
    channel's, summed over the images (b unused)."""
    n, c, h, wd = x.shape
    o, oh, ow = g.shape[1], g.shape[2], g.shape[3]
    for oc in range(lo, hi):
        for t in range(kh * kw):
            dwt[oc, t] = zero
        for i in range(n):
            xc = x[i, oc // m]
            gc = g[i, oc]
            for r in range(oh):
                grow = gc[r]
                for a in range(kh):
                    ih = r * sh - ph + a * dh
                    if ih < 0 or ih >= h:
                        continue
                    src = xc[ih]
                    for e in range(kw):
                        off = e * dw
                        v0, v1 = _span(wd, ow, sw, pw, off)
                        base = off - pw
                        g_s = grow[v0:v1]
                        acc = zero
                        if sw == 1:
                            src_c = src[v0 + base:v1 + base]
                            for v in range(v1 - v0):
                                acc += g_s[v] * src_c[v]
                        else:
                            src_s = src[v0 * sw + base:(v1 - 1) * sw + base + 1:sw]
                            for v in range(v1 - v0):
                                acc += g_s[v] * src_s[v]
                        dwt[oc, a * kw + e] += acc
'''

_BODIES = {"forward": _FORWARD, "xgrad": _XGRAD, "wgrad": _WGRAD}


def _source(which: str, dtype: str) -> str:
    signature = f"void({_SIGNATURES[which]}{_GEOMETRY})".replace("{t}", dtype)
    # (a sum's order is free in the weight gradient's inner loop, so it vectorizes)
    math = ", fastmath={'reassoc'}" if which == "wgrad" else ""
    return ("from numba import njit\n\n\n@njit(inline='always')" + _RANGE
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
    _run(fn, args, n * o, n * o * oh * ow * kernel[0] * kernel[1])
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
    _run(fn, args, o, n * o * oh * ow * kernel[0] * kernel[1])
    return dwt.reshape((o, 1) + tuple(kernel))
