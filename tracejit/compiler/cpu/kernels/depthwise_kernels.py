"""The CPU implementations of ops/depthwise.py's primitives: direct loops over planes.

A depthwise convolution does kh*kw multiply-adds per output; as columns and a GEMM per
channel (the grouped composite) each of them cost a copy into the columns and a tiny
product. Here one numba loop nest runs each (image, channel) plane, no columns made: per
kernel tap one contiguous (vector) run over the whole plane's outputs, at any stride, from
a zero-padded copy of the plane split into its stride phases, made while it is in cache
(`_PLANES`). The planes are independent, so they are shared over the process's threads
(runtime/sharepool.py):

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
_SIGNATURES = dict.fromkeys(("forward", "xgrad"), "{t}[:, :, :, ::1], {t}[:, ::1], {t}[::1], {t}[:, :, :, ::1]")
_SIGNATURES["wgrad"] = "{t}[:, :, :, ::1], {t}[:, :, :, ::1], {t}[::1], {t}[:, ::1]"
# (m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb) and the dtype's zero
_GEOMETRY = ", int64" * 12 + ", {t}"

# Shared by the three kernels as text. A plane is read through a zero-padded copy `pad`
# split into its sh*sw phases (phase (p, q): the padded plane's rows p, p + sh, ... and
# columns q, q + sw, ...), each flat with rows `wq` long, `ps` entries apart, and its
# outputs are made in `wide`, rows `wq` long too: output (r, v) of a tap (a, e) is entry
# r*wq + v of the tap's phase from (a*dh // sh, e*dw // sw) on, so a tap is one contiguous
# run over the whole plane's outputs at any stride (entries v >= OW of a wide row are
# spare, computed and discarded: (kw-1)*dw // sw of them) rather than a short run per row,
# which cost as much in loop set-up as in multiply-adds (a 28-wide plane: 18 against
# 3.7 ms), or a run reading every sw-th entry, which does not vectorize (stride 2 cost
# twice stride 1's time per output).
_PLANES = '''
@njit(inline='always')
def _layout(h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    hq = max((h + 2 * ph + sh - 1) // sh, (kh - 1) * dh // sh + oh)
    wq = max((wd + 2 * pw + sw - 1) // sw, (kw - 1) * dw // sw + ow)
    return wq, hq * wq + (kw - 1) * dw // sw


@njit(inline='always')
def _taps(kh, kw, wq, ps, sh, sw, dh, dw):
    """Where each tap (a, e)'s run starts in the phases (made once a call: a division
    costs as much as some ten multiply-adds, and a small plane has few of those)."""
    offs = np.empty(kh * kw, np.int64)
    for a in range(kh):
        for e in range(kw):
            ra, ce = a * dh, e * dw
            offs[a * kw + e] = ((ra % sh) * sw + ce % sw) * ps + (ra // sh) * wq + ce // sw
    return offs


@njit(inline='always')
def _cols(wd, sw, pw):
    """Per column phase q: the plane's first column in it, where that column lands in a
    phase row, and how many columns the phase holds."""
    v0s = np.empty(sw, np.int64)
    c0s = np.empty(sw, np.int64)
    cnts = np.empty(sw, np.int64)
    for q in range(sw):
        v0 = (q - pw) % sw
        v0s[q] = v0
        c0s[q] = (v0 + pw) // sw
        cnts[q] = max(0, (wd - v0 + sw - 1) // sw)
    return v0s, c0s, cnts


@njit(inline='always')
def _fill1(pad, plane, wq, ph, pw):
    """A plane into one phase (unit strides): its rows copied in place."""
    for r in range(plane.shape[0]):
        prow = pad[(r + ph) * wq + pw:(r + ph) * wq + pw + plane.shape[1]]
        srow = plane[r]
        for v in range(plane.shape[1]):
            prow[v] = srow[v]


@njit(inline='always')
def _fill(pad, plane, wq, ps, sh, sw, ph, v0s, c0s, cnts):
    """A plane into its phases."""
    p = ph % sh
    rq = ph // sh
    for r in range(plane.shape[0]):
        srow = plane[r]
        rowbase = p * sw * ps + rq * wq
        for q in range(sw):
            base = rowbase + q * ps + c0s[q]
            dq = pad[base:base + cnts[q]]
            sq = srow[v0s[q]:]
            if sw == 2:     # (a constant stride: the reads vectorize, as a deinterleave)
                for k in range(cnts[q]):
                    dq[k] = sq[2 * k]
            else:
                for k in range(cnts[q]):
                    dq[k] = sq[k * sw]
        p += 1
        if p == sh:
            p = 0
            rq += 1


@njit(inline='always')
def _unfill1(plane, pad, wq, ph, pw):
    for r in range(plane.shape[0]):
        prow = pad[(r + ph) * wq + pw:(r + ph) * wq + pw + plane.shape[1]]
        drow = plane[r]
        for v in range(plane.shape[1]):
            drow[v] = prow[v]


@njit(inline='always')
def _unfill(plane, pad, wq, ps, sh, sw, ph, v0s, c0s, cnts):
    p = ph % sh
    rq = ph // sh
    for r in range(plane.shape[0]):
        drow = plane[r]
        rowbase = p * sw * ps + rq * wq
        for q in range(sw):
            base = rowbase + q * ps + c0s[q]
            sq = pad[base:base + cnts[q]]
            dq = drow[v0s[q]:]
            if sw == 2:
                for k in range(cnts[q]):
                    dq[2 * k] = sq[k]
            else:
                for k in range(cnts[q]):
                    dq[k * sw] = sq[k]
        p += 1
        if p == sh:
            p = 0
            rq += 1


@njit(inline='always')
def _to_wide(wide, plane, wq):
    for r in range(plane.shape[0]):
        wrow = wide[r * wq:r * wq + plane.shape[1]]
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
    wq, ps = _layout(h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    offs = _taps(kh, kw, wq, ps, sh, sw, dh, dw)
    v0s, c0s, cnts = _cols(wd, sw, pw)
    unit = sh == 1 and sw == 1
    pad = np.zeros(sh * sw * ps, x.dtype)
    cnt = oh * wq
    wide = np.empty(cnt, x.dtype)
    for q in range(lo, hi):
        i = q // c
        ch = q % c
        if unit:     # (a branch here, not in the inlined copy: its loops ran 10-30% slower)
            _fill1(pad, x[i, ch], wq, ph, pw)
        else:
            _fill(pad, x[i, ch], wq, ps, sh, sw, ph, v0s, c0s, cnts)
        for j in range(m):
            oc = ch * m + j
            init = b[oc] if hasb else zero
{FORWARD_TAPS}
            plane = out[i, oc]
            for r in range(oh):
                wrow = wide[r * wq:r * wq + ow]
                orow = plane[r]
                for v in range(ow):
                    orow[v] = wrow[v]
'''

_XGRAD = '''
def kernel(g, w, b, dx, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    \"\"\"Planes [lo, hi) of dx (N, C, H, W), plane q = image q // C, channel q % C: its m
    output channels' gradients through their filters, summed (b unused).\"\"\"
    n, c, h, wd = dx.shape
    oh, ow = g.shape[2], g.shape[3]
    wq, ps = _layout(h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    offs = _taps(kh, kw, wq, ps, sh, sw, dh, dw)
    v0s, c0s, cnts = _cols(wd, sw, pw)
    unit = sh == 1 and sw == 1
    size = sh * sw * ps
    gpad = np.empty(size, g.dtype)
    cnt = oh * wq
    # `wide` inside zeros reaching `size` before and after it, where the unrolled taps read
    # (its spare columns stay zero too: they add nothing)
    ext = np.zeros(2 * size + cnt, g.dtype)
    wide = ext[size:size + cnt]
    ulo, uhi = (ph * wq, min(size, (ph + h) * wq)) if unit else (0, size)    # the rows dx reads
    for q in range(lo, hi):
        i = q // c
        ch = q % c
        for t in range(size):
            gpad[t] = zero
        for j in range(m):
            oc = ch * m + j
            _to_wide(wide, g[i, oc], wq)
{XGRAD_TAPS}
        if unit:
            _unfill1(dx[i, ch], gpad, wq, ph, pw)
        else:
            _unfill(dx[i, ch], gpad, wq, ps, sh, sw, ph, v0s, c0s, cnts)
'''

_WGRAD = '''
def kernel(g, x, b, dwt, m, kh, kw, sh, sw, ph, pw, dh, dw, lo, hi, hasb, zero):
    \"\"\"The m filters of input channels [lo, hi) in dwt (C*m, kh*kw): each tap's products
    of the output gradient's plane and the input's, summed over the images (b unused).\"\"\"
    n, c, h, wd = x.shape
    oh, ow = g.shape[2], g.shape[3]
    wq, ps = _layout(h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    offs = _taps(kh, kw, wq, ps, sh, sw, dh, dw)
    v0s, c0s, cnts = _cols(wd, sw, pw)
    unit = sh == 1 and sw == 1
    pad = np.zeros(sh * sw * ps, x.dtype)
    cnt = oh * wq
    wide = np.zeros(cnt, x.dtype)     # (spare columns zero: they add nothing)
    for ch in range(lo, hi):
        for j in range(m):
            for t in range(kh * kw):
                dwt[ch * m + j, t] = zero
        for i in range(n):
            if unit:
                _fill1(pad, x[i, ch], wq, ph, pw)
            else:
                _fill(pad, x[i, ch], wq, ps, sh, sw, ph, v0s, c0s, cnts)
            for j in range(m):
                oc = ch * m + j
                _to_wide(wide, g[i, oc], wq)
                for a in range(kh):
                    for e in range(kw):
                        off = a * dh * wq + e * dw if unit else offs[a * kw + e]
                        src = pad[off:off + cnt]
                        acc = zero
                        for t in range(cnt):
                            acc += wide[t] * src[t]
                        dwt[oc, a * kw + e] += acc
'''

_BODIES = {"forward": _FORWARD, "xgrad": _XGRAD, "wgrad": _WGRAD}

# Taps up to which a kernel is generated for its window, `_CHUNK` taps' terms a pass over
# the plane's outputs, summed in a register: a pass per tap, which loads and stores each
# output, was bound by the stores (a 7x7 window over a 16x16 plane: 12 taps a pass 3.5x
# faster than one, 1.6x faster than 49). Larger windows take a pass per tap.
_MAX_UNROLL = 64
_CHUNK = 12


def _taps_source(which: str, kk: int) -> str:
    """The forward's sum into `wide` and the input gradient's into `gpad` over the taps at
    `offs`: for `kk` taps unrolled, `_CHUNK` a pass, else (kk 0: any window) a pass a tap.
    Each tap's run is a slice indexed from 0 up (a computed index may be negative, whose
    wrap-around test kept the loop from vectorizing)."""
    pad = " " * 12
    if not kk:
        if which == "forward":
            return (f"{pad}for t in range(cnt):\n{pad}    wide[t] = init\n{pad}for q in range(kh * kw):\n"
                    f"{pad}    wv = w[oc, q]\n{pad}    src = pad[offs[q]:offs[q] + cnt]\n"
                    f"{pad}    for t in range(cnt):\n{pad}        wide[t] += wv * src[t]")
        return (f"{pad}for q in range(kh * kw):\n{pad}    wv = w[oc, q]\n{pad}    dst = gpad[offs[q]:offs[q] + cnt]\n"
                f"{pad}    for t in range(cnt):\n{pad}        dst[t] += wv * wide[t]")
    # forward: wide[t] = init + sum over taps of w * pad[off + t]; input gradient:
    # gpad[u] += sum over taps of w * wide[u - off], wide zero-extended (`ext`)
    fwd = which == "forward"
    lines = [f"{pad}w{q} = w[oc, {q}]" for q in range(kk)]
    lines += [f"{pad}s{q} = pad[offs[{q}]:]" if fwd else f"{pad}s{q} = ext[size - offs[{q}] + ulo:]" for q in range(kk)]
    dst, span = ("wide", "cnt") if fwd else ("gd", "uhi - ulo")
    if not fwd:
        lines.append(f"{pad}gd = gpad[ulo:]")
    for q0 in range(0, kk, _CHUNK):
        first = "init" if fwd and q0 == 0 else f"{dst}[t]"
        lines += [f"{pad}for t in range({span}):", f"{pad}    v = {first}"]
        lines += [f"{pad}    v += w{q} * s{q}[t]" for q in range(q0, min(kk, q0 + _CHUNK))]
        lines.append(f"{pad}    {dst}[t] = v")
    return "\n".join(lines)


def _source(which: str, dtype: str, kk: int = 0) -> str:
    signature = f"void({_SIGNATURES[which]}{_GEOMETRY})".replace("{t}", dtype)
    # (a sum's order is free in the weight gradient's inner loop, so it vectorizes)
    math = ", fastmath={'reassoc'}" if which == "wgrad" else ""
    body = _BODIES[which].replace("{FORWARD_TAPS}", _taps_source("forward", kk)).replace(
        "{XGRAD_TAPS}", _taps_source("xgrad", kk))
    return ("import numpy as np\nfrom numba import njit\n\n" + _PLANES
            + f'\n\n@njit("{signature}", cache=CACHE, error_model="numpy", boundscheck=False, '
            + f"nogil=True{math})" + body)


def _loaded(which: str, dtype, kernel=(0, 0), stride=(1, 1)):
    """The kernel for `which`, generated for `kernel`'s taps where the forward and input
    gradient unroll them (`_MAX_UNROLL`; the input gradient at unit stride: strided, each
    tap reaches one of the phases its unrolled sum would run over)."""
    if dtype not in (np.float32, np.float64):
        return None
    name = np.dtype(dtype).name
    kk = kernel[0] * kernel[1]
    unrolls = which == "forward" or (which == "xgrad" and tuple(stride) == (1, 1))
    kk = kk if unrolls and kk <= _MAX_UNROLL else 0
    return _kernel(("depthwise", which, name) + ((kk,) if kk else ()), lambda: _source(which, name, kk)).get()


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
    fn = _loaded("forward", x.dtype, kernel)
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
    fn = _loaded("xgrad", g.dtype, kernel, stride)
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
