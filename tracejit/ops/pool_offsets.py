"""Max-pooling that records each window's argmax: the backward scatters, never reads the input.

``F.max_pool2d`` on floating inputs is two primitives (a record, then the differentiable
result read from it, as ops/lstm_prim.py does):

- ``max_pool2d_with_offsets(x)`` -> R, (2, N, C, OH, OW) of x's dtype: R[0] the maxima,
  R[1] each window's offset of its first maximum (``i*kw + j``; a NaN window: its first
  NaN). One pass over x, no VJP.
- ``max_pool2d_values(R, x)`` -> R[0], a view of the record's head, not marked a view so an
  in-place op on it bumps no saved version. Its VJP is ``max_pool2d_scatter``; x's values
  are never read, so a compiled step keeps only R for the backward.
- ``max_pool2d_scatter(g, R, input_shape)`` -> gx: g at each window's recorded position
  (overlapping windows add), zero elsewhere; its VJP is ``max_pool2d_take``, and back.

Why: a backward that re-reads the input to find each window's maximum again took ~25
cycles a window in scalar compare-and-select code. The scatter stores
``bits(g) & -(offset == k)`` through integer views: no data-dependent branch.

The gradient goes to the first maximum in row-major window order (PyTorch's CPU kernel
keeps the first of equal maxima); a NaN window's to its first NaN (PyTorch: the last).
ops/pooling_prim.py's ``max_pool2d`` remains for the integer dtypes.
"""
from __future__ import annotations

import sys

import numpy as np

from ..errors import ShapeError
from .pooling_prim import _fill_low, _out_hw, _padded, _pool_rule, _views
from .registry import Aval, defprim
from .eager import bind

__all__ = ["max_pool2d_with_offsets", "max_pool2d_values", "max_pool2d_scatter", "max_pool2d_take",
           "MAX_OFFSETS"]

MAX_OFFSETS = 2048   # window positions whose offsets every float dtype holds exactly (float16)
_EXACT = {"float32": 1 << 24, "float64": 1 << 53,   # ... and those float32 and float64 hold
          "bfloat16": 1 << 8}                   # (bf16: offsets to 256, its exact integers)


def _record_rule(x, kernel, stride, padding, dilation):
    a = _pool_rule("max_pool2d")(x, kernel, stride, padding, dilation)
    if not x.dtype.is_floating_point:
        raise TypeError(f"max_pool2d_with_offsets: expected a floating point input, got {x.dtype.name}")
    return Aval((2,) + a.shape, x.dtype, x.device)


def _record_impl(xp, x, kernel, stride, padding, dilation):
    n, c, h, w = x.shape
    oh, ow = _out_hw(h, w, kernel, stride, padding, dilation)
    rec = xp.empty((2, n, c, oh, ow), dtype=x.dtype)
    out, off = rec[0], rec[1]
    if xp is np and _halves(kernel, stride, padding, dilation) and _record_2x2(x, rec):
        return rec
    views = list(_views(_padded(xp, x, padding, _fill_low(x.dtype)), kernel, stride, dilation,
                        oh, ow))
    out[...] = views[0]
    for v in views[1:]:
        xp.maximum(out, v, out=out)  # propagates NaN, as PyTorch's max_pool2d
    _first_offsets(xp, views, out, off)
    return rec


def _halves(kernel, stride, padding, dilation) -> bool:
    """2x2 windows side by side (LeNet's pooling): `_record_2x2` may apply."""
    return (tuple(kernel) == (2, 2) and tuple(stride) == (2, 2) and tuple(padding) == (0, 0)
            and tuple(dilation) == (1, 1))


# Input elements per block of `_record_2x2`: its temporaries are reused from block to
# block, so a cold first call faults in few fresh pages (1 << 18 had the same steady time).
_BLOCK_2X2 = 1 << 16


def _record_2x2(x, rec) -> bool:
    """The record of 2x2 windows that tile a C-contiguous x (or its first 2*OH rows and
    2*OW columns in floor mode), by flat 1-D numpy loops; False (the general form runs) for
    any other x or a NaN window. The general form's strided views ran an inner loop per
    row. Here even and odd elements are each row's left and right columns: T = max(left,
    right) gives every row's pair maxima, and max(T[:-OW], T[OW:]) the windows' (odd rows
    computed and dropped). Block by block of whole planes (`_BLOCK_2X2`).

    The offset is the first maximum in row-major order: with a, b the top row, c, d the
    bottom, T = max(a, b), B = max(c, d), m = max(T, B): a when T == m and a >= b; b when
    T == m otherwise; else c when c >= d; else d."""
    n, c, h, w = x.shape
    oh, ow = rec.shape[3], rec.shape[4]
    th, tw = 2 * oh, 2 * ow                           # the tiled rows and columns
    if h - th not in (0, 1) or w - tw not in (0, 1) or not x.flags.c_contiguous or not rec.size:
        return False
    crop = (h, w) != (th, tw)
    xf = x.reshape(-1)
    out, off = rec[0].reshape(-1, ow), rec[1].reshape(-1, ow)
    per = max(1, _BLOCK_2X2 // (th * tw))             # planes per block
    size = min(n * c, per) * th * ow                  # T's elements in a block
    t, m = np.empty(size, x.dtype), np.empty(size - ow, x.dtype)
    first, top = np.empty(size, bool), np.empty(size - ow, bool)
    ge = np.empty(2 * size, bool) if sys.byteorder == "little" else None
    if crop:
        planes = x.reshape(n * c, h, w)
        tiled = np.empty((min(n * c, per), th, tw), x.dtype)
    for p0 in range(0, n * c, per):
        k = min(n * c, p0 + per) - p0
        if crop:
            xs = tiled[:k]
            xs[...] = planes[p0:p0 + k, :th, :tw]
            xs = xs.reshape(-1)
        else:
            xs = xf[p0 * h * w:(p0 + k) * h * w]
        ts, fs = t[:k * th * ow], first[:k * th * ow]
        ms, tops = m[:k * th * ow - ow], top[:k * th * ow - ow]
        np.maximum(xs[0::2], xs[1::2], out=ts)       # every row's pair maxima
        if ge is None:
            np.greater_equal(xs[0::2], xs[1::2], out=fs)  # the left one is it (a >= b: a == T)
        else:
            # The same, as every element against the next (one contiguous loop, SIMD),
            # whose even elements are the pairs': the low byte of each little-endian uint16
            # pair of bools, kept by the narrowing cast (7.8 against 15 us a block).
            gs = ge[:2 * fs.size]
            np.greater_equal(xs[:-1], xs[1:], out=gs[:-1])
            np.copyto(fs.view(np.uint8), gs.view(np.uint16), casting="unsafe")
        np.maximum(ts[:-ow], ts[ow:], out=ms)        # rows r and r+1; the windows: r even
        rows = slice(p0 * oh, (p0 + k) * oh)
        out[rows] = ms.reshape(-1, ow)[0::2]
        np.equal(ts[:-ow], ms, out=tops)             # T == m
        sel = np.logical_and(tops, fs[:-ow])         # a
        lower = np.logical_not(tops, out=tops)
        sel |= np.logical_and(lower, fs[ow:], out=fs[ow:])   # c (fs is not read again)
        o8 = lower.view(np.uint8)
        o8 += o8
        o8 += np.logical_not(sel, out=sel).view(np.uint8)
        off[rows] = o8.reshape(-1, ow)[0::2]
    return not np.isnan(rec[0]).any()


def _first_offsets(xp, views, out, off):
    """off = the window offset of each output's first maximum (a NaN window: its first NaN),
    branch-free from the last offset back: ``r = miss_o * (1 + r)`` counts the misses
    before the first hit (boolean-mask stores cost ~1 ms each)."""
    nan = xp.isnan(out)
    if not bool(nan.any()):
        nan = None
    off[...] = 0
    for o in range(len(views) - 2, -1, -1):
        miss = views[o] != out
        if nan is not None:
            miss &= ~xp.isnan(views[o])
        xp.add(off, 1, out=off)
        xp.multiply(off, miss, out=off)


def _check_record(op, rec, shape, kernel, stride, padding, dilation):
    expect = _pool_rule(op)(Aval(shape, rec.dtype, rec.device), kernel, stride, padding, dilation)
    if tuple(rec.shape) != (2,) + expect.shape:
        raise ShapeError(f"{op}: record of shape {tuple(rec.shape)} is not max_pool2d_with_offsets' "
                         f"record (2,) + {expect.shape} for an input of shape {tuple(shape)}")
    return expect


def _values_rule(rec, x, kernel, stride, padding, dilation):
    return _check_record("max_pool2d_values", rec, x.shape, kernel, stride, padding, dilation)


def _values_impl(xp, rec, x, kernel, stride, padding, dilation):
    return rec[0]   # (a view: see the module docstring; a channel-major record's order kept)


def _values_vjp(g, out, rec, x, kernel, stride, padding, dilation):
    return (None, max_pool2d_scatter(g, rec, tuple(x.shape), kernel, stride, padding, dilation))


def _scatter_rule(g, rec, input_shape, kernel, stride, padding, dilation):
    expect = _check_record("max_pool2d_scatter", rec, input_shape, kernel, stride, padding, dilation)
    if tuple(g.shape) != expect.shape:
        raise ShapeError(f"max_pool2d_scatter: gradient shape {tuple(g.shape)} must be the pooled "
                         f"output shape {expect.shape}")
    return Aval(input_shape, g.dtype, g.device)


def _scatter_impl(xp, g, rec, input_shape, kernel, stride, padding, dilation):
    n, c, h, w = input_shape
    ph, pw = padding
    oh, ow = g.shape[2], g.shape[3]
    if xp is np and _halves(kernel, stride, padding, dilation):
        gx = _scatter_2x2(g, rec, tuple(input_shape))
        if gx is not None:
            return gx
    off = rec[1]
    gx = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=g.dtype)
    if (xp is np and tuple(dilation) == (1, 1) and stride[0] >= kernel[0]
            and stride[1] >= kernel[1]):
        # Windows apart: each position is in one window at most, so a store, not a
        # read-add-write: ``bits(g + 0) & -(off == o)`` through integer views (3x faster
        # than np.where). g + 0 maps -0.0 to 0.0 as the add to zeros did.
        ints = np.dtype(f"i{g.dtype.itemsize}")
        gbits = (g + 0).view(ints)
        gx_bits = gx.view(ints)
        for o, view in enumerate(_views(gx_bits, kernel, stride, dilation, oh, ow)):
            mask = xp.equal(off, o).view(np.int8).astype(ints)
            xp.negative(mask, out=mask)
            xp.bitwise_and(gbits, mask, out=view)
    else:
        for o, view in enumerate(_views(gx, kernel, stride, dilation, oh, ow)):
            view += xp.where(off == o, g, 0)   # overlapping windows accumulate
    return gx[:, :, ph:ph + h, pw:pw + w] if (ph or pw) else gx


def _scatter_2x2(g, rec, input_shape):
    """max_pool2d_scatter of 2x2 windows that tile the input (or its first 2*OH rows and
    2*OW columns), float32/float16, a C-contiguous record; else None (the general form
    runs). Each window row of two positions is one integer of twice g's width, so g's bits
    shifted left by offset * width land in the top row's pair (offsets 0, 1) and, shifted
    by (offset - 2) * width, in the bottom row's: 5 numpy passes where masks took 10. Block
    by block through reused scratch; same bits as the general form (``g + 0``, zeros).

    g in C order, or with contiguous (OH, OW) planes in another order (a convolution's
    channel-major input gradient): then blocks of whole images, copied into C order by the
    `g + 0` the block makes anyway."""
    n, c, h, w = input_shape
    oh, ow = g.shape[2], g.shape[3]
    th, tw = 2 * oh, 2 * ow                           # the tiled rows and columns
    if (h - th not in (0, 1) or w - tw not in (0, 1) or g.dtype.itemsize > 4 or g.dtype != rec.dtype
            or not g.size or not rec.flags.c_contiguous or sys.byteorder != "little"):
        return None
    flat = g.flags.c_contiguous
    if not flat and (g.strides[3] != g.itemsize or g.strides[2] != ow * g.itemsize):
        return None
    crop = (h, w) != (th, tw)
    half, pair = np.dtype(f"u{g.dtype.itemsize}"), np.dtype(f"u{2 * g.dtype.itemsize}")
    gx = np.empty(input_shape, dtype=g.dtype)
    if crop:   # (plane, window row, top/bottom, 2*OW positions) of the tiled part
        planes = gx.view(half).reshape(n * c, h, w)
        planes[:, th:] = 0
        planes[:, :th, tw:] = 0
        rows4 = planes[:, :th, :tw].reshape(n * c, oh, 2, tw)
    else:
        rows2 = gx.view(pair).reshape(n * c * oh, 2, ow)   # (window row, top/bottom, window)
    of = rec[1].reshape(-1)
    total, img = of.size, c * oh * ow
    size = min(total, max(1, _BLOCK_2X2 // (4 * ow)) * ow)   # whole window rows
    unit = img if not flat else oh * ow if crop else ow   # whole images; planes; window rows
    size = min(total, max(1, size // unit) * unit)
    gf = g.reshape(-1) if flat else None
    val, shift, tmp = np.empty(size, pair), np.empty(size, pair), np.empty(size, g.dtype)
    mask = np.empty(size, pair) if crop else None
    for lo in range(0, total, size):
        hi = min(total, lo + size)
        v, s, t, o = val[:hi - lo], shift[:hi - lo], tmp[:hi - lo], of[lo:hi]
        if flat:
            np.add(gf[lo:hi], 0, out=t)
        else:
            np.add(g[lo // img:hi // img], 0, out=t.reshape(-1, c, oh, ow))
        v[...] = t.view(half)                        # zero-extended
        # The pair's shift: offset * g's width (offsets 2, 3 shift out of the top row:
        # numpy gives 0 for a shift by the width or more); the bottom row's is two
        # positions less, wrapping round. Through uint8, which has a SIMD conversion to
        # uint64 before AVX-512 (float has not).
        np.multiply(o, 8 * g.dtype.itemsize, out=t)
        s[...] = t.astype(np.uint8)
        if crop:
            m = mask[:hi - lo]
            np.left_shift(v, s, out=m)
            s -= 16 * g.dtype.itemsize
            np.left_shift(v, s, out=v)
            ps = slice(lo // (oh * ow), hi // (oh * ow))
            rows4[ps, :, 0] = m.view(half).reshape(-1, oh, tw)
            rows4[ps, :, 1] = v.view(half).reshape(-1, oh, tw)
        else:   # each shift straight into the window rows
            rows = slice(lo // ow, hi // ow)
            np.left_shift(v.reshape(-1, ow), s.reshape(-1, ow), out=rows2[rows, 0])
            s -= 16 * g.dtype.itemsize
            np.left_shift(v.reshape(-1, ow), s.reshape(-1, ow), out=rows2[rows, 1])
    return gx


def _scatter_vjp(gg, out, g, rec, input_shape, kernel, stride, padding, dilation):
    return (max_pool2d_take(gg, rec, kernel, stride, padding, dilation), None)


def _take_rule(a, rec, kernel, stride, padding, dilation):
    return _check_record("max_pool2d_take", rec, a.shape, kernel, stride, padding, dilation)


def _take_impl(xp, a, rec, kernel, stride, padding, dilation):
    # Only higher derivatives run this: numpy passes per window offset.
    oh, ow = rec.shape[3], rec.shape[4]
    off = rec[1]
    apad = _padded(xp, a, padding, 0)   # a padding position takes 0 (scatter drops it)
    out = xp.zeros(off.shape, dtype=a.dtype)
    for o, view in enumerate(_views(apad, kernel, stride, dilation, oh, ow)):
        out = xp.where(off == o, view, out)
    return out


def _take_vjp(g, out, a, rec, kernel, stride, padding, dilation):
    return (max_pool2d_scatter(g, rec, tuple(a.shape), kernel, stride, padding, dilation), None)


MAX_POOL2D_WITH_OFFSETS = defprim("max_pool2d_with_offsets", _record_impl, _record_rule, None,
                                  kind="other",   # (offsets to 256: bf16's exact integers)
                                  extra={"selects": lambda p: p["kernel"][0] * p["kernel"][1] <= 256})
MAX_POOL2D_VALUES = defprim("max_pool2d_values", _values_impl, _values_rule, _values_vjp,
                            kind="other", save=lambda rq: (0,), nondiff=(0,),
                            extra={"meta": (1,), "shape_only": (1,), "selects": True, "moves": (0,)},
                            grad_name="MaxPool2DWithIndicesBackward0")
MAX_POOL2D_SCATTER = defprim("max_pool2d_scatter", _scatter_impl, _scatter_rule, _scatter_vjp,
                             kind="other", save=lambda rq: (1,), nondiff=(1,),
                             grad_name="MaxPool2DWithIndicesBackwardBackward0")
MAX_POOL2D_TAKE = defprim("max_pool2d_take", _take_impl, _take_rule, _take_vjp, kind="other",
                          save=lambda rq: (1,), nondiff=(1,), extra={"meta": (0,)})


def max_pool2d_with_offsets(x, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """(2, N, C, OH, OW): the maxima of each window and the window offset of the first
    maximum (see the module docstring); not differentiable."""
    return bind(MAX_POOL2D_WITH_OFFSETS, x, kernel=kernel, stride=stride, padding=padding,
                dilation=dilation)


def max_pool2d_values(rec, x, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """max_pool2d of `x` read from its record `rec`: differentiable w.r.t. x."""
    return bind(MAX_POOL2D_VALUES, rec, x, kernel=kernel, stride=stride, padding=padding,
                dilation=dilation)


def max_pool2d_scatter(g, rec, input_shape, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """An `input_shape` array with `g` added at each window's recorded position."""
    return bind(MAX_POOL2D_SCATTER, g, rec, input_shape=tuple(input_shape), kernel=kernel,
                stride=stride, padding=padding, dilation=dilation)


def max_pool2d_take(a, rec, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """`a` (the input's shape) at each window's recorded position."""
    return bind(MAX_POOL2D_TAKE, a, rec, kernel=kernel, stride=stride, padding=padding,
                dilation=dilation)


def max_pool2d(x, kernel, stride, padding=(0, 0), dilation=(1, 1)):
    """max_pool2d of a floating `x` through its record (the composite's path)."""
    rec = max_pool2d_with_offsets(x, kernel, stride, padding, dilation)
    return max_pool2d_values(rec, x, kernel, stride, padding, dilation)


def applies(x, kernel) -> bool:
    """Does max_pool2d of `x` go through the record (a floating dtype, offsets exact)?"""
    return x.dtype.is_floating_point and kernel[0] * kernel[1] <= _EXACT.get(x.dtype.name, MAX_OFFSETS)
