"""Max-pooling that records each window's argmax: the backward scatters, never reads the input.

``F.max_pool2d`` on floating inputs is two primitives (a record, then the differentiable
result read from it, as ops/lstm_prim.py does):

- ``max_pool2d_with_offsets(x)`` -> R, (2, N, C, OH, OW) of x's dtype: R[0] the maxima,
  R[1] each window's offset of its first maximum (``i*kw + j``; a NaN window: its last
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
keeps the first of equal maxima); a NaN window's to its last NaN, as PyTorch's.
ops/pooling_prim.py's ``max_pool2d`` remains for the integer dtypes.
"""
from __future__ import annotations

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
    views = list(_views(_padded(xp, x, padding, _fill_low(x.dtype)), kernel, stride, dilation,
                        oh, ow))
    out[...] = views[0]
    for v in views[1:]:
        xp.maximum(out, v, out=out)  # propagates NaN, as PyTorch's max_pool2d
    _first_offsets(xp, views, out, off)
    return rec


def _first_offsets(xp, views, out, off):
    """off = the window offset of each output's first maximum (a NaN window: its last NaN),
    branch-free from the last offset back: ``r = miss_o * (1 + r)`` counts the misses
    before the first hit (boolean-mask stores cost ~1 ms each)."""
    off[...] = 0
    for o in range(len(views) - 2, -1, -1):
        miss = views[o] != out
        xp.add(off, 1, out=off)
        xp.multiply(off, miss, out=off)
    nan = xp.isnan(out)
    if bool(nan.any()):   # (PyTorch's kernels: a NaN replaces the maximum, nothing beats it)
        for o, v in enumerate(views):
            xp.copyto(off, o, where=xp.isnan(v))


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
