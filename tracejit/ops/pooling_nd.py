"""Pooling in one and three dimensions (and the 2-D forms the primitives do not cover), with
indices, L^p pooling and unpooling.

Every window reduction here goes through one table (`_window_table`): for each output
position the flat input positions of its window (K = the product of the kernel sizes)
and which of them are inside the input. The input, flattened per (N, C), is gathered
with that table -- a getitem with a constant integer tensor, whose gradient is the
scatter-add of the output gradient -- and reduced over K: max (padding reads -inf, the
index of the first maximum in window order, as PyTorch scans), sum and average (PyTorch's
divisors: the window clipped to the padded input, or to the input without
``count_include_pad``). Adaptive pooling uses the same gather with PyTorch's adaptive bins
(short bins repeat their last position, harmless for a max); averages are a mean over
each block where the bins are equal, else one small averaging matrix per axis. Tables are
numpy constants of static sizes and, of symbolic ones, the same arithmetic traced. The 2-D
max and average pools of composite.py stay the fast path where they apply; these cover
the other ranks and options (avg_pool2d's ceil_mode, count_include_pad, divisor_override).
Floating average pools of every rank with the default options (and so L^p pooling) run
avg_pool2d's window-offset primitive instead of the table (`_offset_avg`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..exactcall import specialize
from ..errors import ArgumentError, ShapeError, expect_floating, expect_not_bool
from .conv import _ntuple
from ..shapes import Sym
from .creation import arange, tensor, zeros
from .elementwise import abs as _abs, cast, isnan, relu, sign, where
from .indexing import gather, getitem, in_range
from .indexing_more import scatter
from .linalg import matmul
from .reductions import argmax, mean, sum as _sum
from .shape import expand, flip, reshape, squeeze, transpose, unsqueeze
from .dtype_checks import takes
from .registry import trace_state
from . import autocast as _autocast

__all__ = ["max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "max_pool1d_with_indices",
           "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_avg_pool1d",
           "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool3d",
           "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
           "adaptive_max_pool3d_with_indices", "lp_pool1d", "lp_pool2d", "lp_pool3d",
           "max_unpool1d", "max_unpool2d", "max_unpool3d"]


def _ranked(impl, n: int, name: str, **fixed):
    """`impl` at rank `n` as the public function `name` (its errors naming `name`)."""
    return specialize(impl, name, n=n, op=name, **fixed)


def _batched(x, n: int, op: str):
    """x as (N, C, *spatial) with n spatial dims; whether a batch dim was added."""
    if x.ndim == n + 1:
        return unsqueeze(x, 0), True
    if x.ndim != n + 2:
        raise ShapeError(f"{op}: expected a {n + 1}-D or {n + 2}-D input, got shape {tuple(x.shape)}")
    return x, False


def widened(pool, x, *args, **kwargs):
    """``pool(x, ...)`` (an average pool) computed in the dtype PyTorch's CPU kernels take for
    x's, or None where that is x's own: float32 for float16/bfloat16, rounded once at the
    end; float64 for int64, whose exact quotient the cast back truncates, as integer division."""
    d = x.dtype
    wide = _dt.float32 if d in (_dt.float16, _dt.bfloat16) else None if d.is_floating_point else _dt.float64
    return None if wide is None else cast(pool(cast(x, wide), *args, **kwargs), d)


def pool_out(size, k, s, p, ceil_mode):
    """Output length of a window of extent k (PyTorch's rule for ceil_mode: the last window
    must start inside the input or the left padding). Of ceil_mode's two bounds on the last
    start, ceil((size + 2p - k) / s) and (size + p - 1) // s, the lesser is one floor
    division (p <= k), so a symbolic size needs no guard."""
    if not ceil_mode:
        return (size + 2 * p - k) // s + 1
    return (size + p - 1 + min(p + s - k, 0)) // s + 1


def pool_geometry(size, k, s, p, ceil_mode):
    """`pool_out`, and the extra right padding ceil_mode needs; of a symbolic size its bound
    s - 1 (whose extra windows the caller cuts off), as its sign would be guarded."""
    out = pool_out(size, k, s, p, ceil_mode)
    if ceil_mode and isinstance(size, Sym):
        return out, s - 1
    return out, max(0, (out - 1) * s + k - (size + 2 * p)) if ceil_mode else 0


def _index(n, dev):
    """0, ..., n - 1: a numpy array (tables of static sizes are constants of a capture), or
    of a symbolic size (`dev`: the input's device) a traced tensor computed on each call."""
    return np.arange(n) if dev is None else arange(n, dtype=_dt.int64, device=dev)


def _table(a, device, dtype=None):
    """A table made by `_index` arithmetic as a tensor on `device`."""
    if isinstance(a, np.ndarray):
        return tensor(a, dtype=dtype, device=device)
    return a if dtype is None else cast(a, dtype)


def _symbolic_on(x, sizes):
    """x's device where one of `sizes` is symbolic (its tables are traced), else None."""
    return x.device if any(isinstance(v, Sym) for v in sizes) else None


def _axis_windows(size, k, s, p, d, ceil_mode, op, dev):
    for what, v, least in (("kernel_size", k, 1), ("stride", s, 1), ("dilation", d, 1), ("padding", p, 0)):
        if v < least:   # (a window of them would read garbage positions, or divide by 0)
            raise ArgumentError(f"{op}: {what} must be {'positive' if least else 'non-negative'}, got {v}")
    keff = d * (k - 1) + 1
    if p > k // 2:
        raise ArgumentError(f"{op}: padding {p} should be at most half of kernel size {k}")
    out = pool_out(size, keff, s, p, ceil_mode)
    if out <= 0:
        raise ShapeError(f"{op}: input of size {size} is too small for kernel {k} (padding {p}, "
                         f"dilation {d})")
    start = _index(out, dev) * s - p
    pos = start[:, None] + _index(k, dev) * d
    valid = (pos >= 0) & (pos < size)
    # PyTorch's divisor with count_include_pad: the window clipped to the padded input
    span = (start + k).clip(max=size + p) - start
    return pos, valid, span


def _combine(per_axis, spatial):
    """Per-axis (out_a, k_a) tables -> one (O, K) table of flat positions, its validity."""
    n = len(per_axis)
    flat = valid = None
    for a, (pos, ok) in enumerate(per_axis):
        shape = [1] * (2 * n)
        shape[a], shape[n + a] = pos.shape
        at = (pos.clip(0, spatial[a] - 1) * math.prod(spatial[a + 1:])).reshape(tuple(shape))
        flat = at if flat is None else flat + at
        valid = ok.reshape(tuple(shape)) if valid is None else valid & ok.reshape(tuple(shape))
    outs = tuple(p.shape[0] for p, _ in per_axis)
    shape = (math.prod(outs), math.prod(p.shape[1] for p, _ in per_axis))
    return flat.reshape(shape), valid.reshape(shape), outs


def _window_table(spatial, k, s, p, d, ceil_mode, op, dev):
    per = [_axis_windows(spatial[a], k[a], s[a], p[a], d[a], ceil_mode, op, dev) for a in range(len(spatial))]
    return _combine([(pos, ok) for pos, ok, _ in per], spatial) + ([span for *_, span in per],)


def _gathered(x, flat):
    """(N, C, O, K): the input's values at each window's flat positions."""
    n, c = x.shape[0], x.shape[1]
    xf = reshape(x, (n, c, math.prod(x.shape[2:])))   # (no -1: the batch may be empty)
    idx = _table(flat.reshape(-1), x.device)
    return reshape(getitem(xf, (slice(None), slice(None), idx)), (n, c) + tuple(flat.shape))


def _max_windows(x, flat, valid, outs, with_indices):
    # The windows' values only choose an element: the result gathers that one element of x,
    # so the backward adds N*C*O values, not the N*C*O*K of every window's slots
    # (adaptive_max_pool2d (16, 64, 14, 14) -> 5x5, fwd+bwd: ~4x PyTorch's time as the latter).
    g = _gathered(x.detach(), flat)
    all_valid = isinstance(valid, np.ndarray) and bool(valid.all())
    if not all_valid:
        vt = _table(valid, x.device)
        g = where(vt, g, float("-inf"))
    # the value at the index taken: the gradient goes to that one element of a window, ties
    # included, and reads no values (the output may be written in place), as PyTorch's
    pick = argmax(g, -1, keepdim=True)                                # (N, C, O, 1)
    if x.dtype.is_floating_point:
        pick = _last_nan(g, pick)
    table = _table(flat, x.device)
    idx = gather(expand(table, tuple(g.shape)), -1, pick)             # flat positions in H*W...
    if not all_valid:
        # a window whose valid values are all -inf may pick a padding slot (clipped to an
        # edge element, maybe outside the window): it takes its first valid one
        first = gather(table, -1, argmax(cast(vt, _dt.int32), -1, keepdim=True))   # (O, 1)
        idx = where(gather(expand(vt, tuple(g.shape)), -1, pick), idx, first)
    n, c = x.shape[0], x.shape[1]
    xf = reshape(x, (n, c, math.prod(x.shape[2:])))
    out = gather(xf, -1, squeeze(idx, -1))
    shape = tuple(x.shape[:2]) + outs
    if not with_indices:
        return reshape(out, shape)
    return reshape(out, shape), reshape(idx, shape)


def _last_nan(g, pick):
    """`pick` where the window (last dim of `g`) holds no NaN, else its last NaN's slot:
    PyTorch's kernels let a NaN replace the running maximum and no later value beat it.
    (argmax takes the first NaN; over the reversed window, the last. Eager, a pooling with
    no NaN taken skips that second pass over the windows.)"""
    nan = isnan(gather(g, -1, pick))
    if trace_state.tracer is None and not bool(nan.any()):
        return pick
    last = (g.shape[-1] - 1) - argmax(flip(g, (-1,)), -1, keepdim=True)
    return where(nan, last, pick)


def _max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
              return_indices: bool = False, *, n, op, with_indices=False):
    return_indices = return_indices or with_indices
    if n == 1 and not return_indices:
        # PyTorch's max_pool1d has floating point kernels only (with indices it runs
        # max_pool2d's, which take integers too); no max pool has a bool one
        expect_floating(op, "input", input)
    expect_not_bool(op, "input", input)
    x, unbatched = _batched(input, n, op)
    k = _ntuple(kernel_size, n, "kernel_size", op)
    s = k if stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0) \
        else _ntuple(stride, n, "stride", op)
    p, d = _ntuple(padding, n, "padding", op), _ntuple(dilation, n, "dilation", op)
    flat, valid, outs, _ = _window_table(tuple(x.shape[2:]), k, s, p, d, ceil_mode, op,
                                         _symbolic_on(x, x.shape[2:]))
    if n == 1 and not return_indices and not ceil_mode:
        # as a (1, k) max_pool2d: its offset record makes the backward one pass, where the
        # gathered windows' is a scatter (MaxPool1d(4) of (64, 32, 495), forward and
        # backward: ~10x faster than the gathered windows)
        from .composite import max_pool2d
        res = squeeze(max_pool2d(unsqueeze(x, 2), (1, k[0]), (1, s[0]), (0, p[0]), (1, d[0])), 2)
        return squeeze(res, 0) if unbatched else res
    if (n == 3 and not return_indices and not ceil_mode and k[0] == 1 and p[0] == 0
            and x.dtype.is_floating_point and all(type(v) is int for v in x.shape)):
        # a window one plane deep (R(2+1)D's (1, 3, 3)): max_pool2d over the planes it
        # keeps, its offset record's one-pass backward too ((4, 16, 8, 28, 28), forward
        # and backward: ~3.7x faster than the gathered windows)
        from .composite import max_pool2d
        planes = x if s[0] == 1 else getitem(x, (slice(None), slice(None), slice(None, None, s[0])))
        b, c, depth = planes.shape[:3]
        res = max_pool2d(reshape(planes, (b, c * depth) + tuple(x.shape[3:])), k[1:], s[1:], p[1:], d[1:])
        res = reshape(res, (b, c, depth) + tuple(res.shape[2:]))
        return squeeze(res, 0) if unbatched else res
    res = _max_windows(x, flat, valid, outs, return_indices)
    if unbatched:
        res = tuple(squeeze(r, 0) for r in res) if return_indices else squeeze(res, 0)
    return res


# (the 3-D forms are on PyTorch's CPU autocast float32 list, the 1-D ones on no list)
max_pool1d, max_pool3d = _ranked(_max_pool, 1, "max_pool1d"), _autocast.fp32(_ranked(_max_pool, 3, "max_pool3d"))
max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices = (
    _ranked(_max_pool, n, f"max_pool{n}d_with_indices", with_indices=True) for n in (1, 2, 3))


def _avg_pool(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
              count_include_pad: bool = True, divisor_override=None, *, n, op):
    if (out := widened(_avg_pool, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override, n=n, op=op)) is not None:
        return out
    x, unbatched = _batched(input, n, op)
    k = _ntuple(kernel_size, n, "kernel_size", op)
    s = k if stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0) \
        else _ntuple(stride, n, "stride", op)
    p = _ntuple(padding, n, "padding", op)
    dev = _symbolic_on(x, x.shape[2:])
    flat, valid, outs, spans = _window_table(tuple(x.shape[2:]), k, s, p, (1,) * n, ceil_mode, op, dev)
    if not ceil_mode and count_include_pad and divisor_override is None \
            and x.dtype.is_floating_point:
        # through avg_pool2d's primitive: a sum of offset views, whose backward is one pass
        # where the gathered windows' is a scatter-add repeating each position K times
        # (AvgPool3d(2) of (4, 8, 16, 16, 16) forward and backward: ~4x faster)
        res = _offset_avg(x, k, s, p)
        return squeeze(res, 0) if unbatched else res
    g = _gathered(x, flat)
    if not isinstance(valid, np.ndarray) or not valid.all():
        g = g * _table(valid, x.device, x.dtype)
    total = _sum(g, -1)
    if divisor_override:
        div = float(divisor_override)
    elif count_include_pad:
        div = 1
        for a, span in enumerate(spans):
            shape = [1] * n
            shape[a] = span.shape[0]
            div = div * span.reshape(tuple(shape))
        div = _table(div.reshape(-1), x.device, x.dtype)
    else:
        div = _table(valid.sum(1), x.device, x.dtype)
    out = reshape(total / div, tuple(x.shape[:2]) + outs)
    return squeeze(out, 0) if unbatched else out


def _offset_avg(x, k, s, p):
    """The average pool of (N, C, *spatial) `x` counting the padding as zeros, by
    avg_pool2d's primitive: of one dim as (1, k) windows; of three, the (H, W) windows of
    each depth slice, then the depth windows of those (a box of a constant divisor is
    separable: its mean is the mean over depth of the means over the (H, W) windows)."""
    from .pooling_prim import avg_pool2d
    nb, c = x.shape[0], x.shape[1]
    if len(k) == 1:
        return squeeze(avg_pool2d(unsqueeze(x, 2), (1, k[0]), (1, s[0]), (0, p[0])), 2)
    if len(k) == 2:
        return avg_pool2d(x, k, s, p)
    d, h, w = x.shape[2:]
    plane = avg_pool2d(reshape(x, (nb, c * d, h, w)), k[1:], s[1:], p[1:])
    oh, ow = plane.shape[2:]
    out = avg_pool2d(reshape(plane, (nb, c, d, oh * ow)), (k[0], 1), (s[0], 1), (p[0], 0))
    return reshape(out, (nb, c, out.shape[2], oh, ow))


# (PyTorch's avg_pool kernels take int64 too, not the narrower ints)
avg_pool1d, avg_pool3d = (takes("input", also=(_dt.int64,), op=f"avg_pool{n}d")(
    _ranked(_avg_pool, n, f"avg_pool{n}d")) for n in (1, 3))
avg_pool3d = _autocast.fp32(avg_pool3d)
# (avg_pool2d with the options composite.py's primitive does not take: ceil_mode, ...)
avg_pool2d_ext = _ranked(_avg_pool, 2, "avg_pool2d")


# ---------------------------------------------------------------- adaptive
def _bins(size, out, dev):
    """PyTorch's adaptive bins: [floor(i*size/out), ceil((i+1)*size/out)) (`_index`'s kind)."""
    i = _index(out, dev)
    return (i * size) // out, -((-(i + 1) * size) // out)


def avg_weights(size, out, dtype, device):
    """(size, out) in `dtype`: column i averages adaptive bin i (`_bins`)."""
    dev = device if isinstance(size, Sym) or isinstance(out, Sym) else None
    start, end = _bins(size, out, dev)
    rows = _index(size, dev)[:, None]
    inside = (rows >= start) & (rows < end)
    if dev is None:
        return tensor(inside / (end - start), dtype=dtype, device=device)
    return cast(inside, dtype) / cast(end - start, dtype)


def _equal_bins(s, o) -> bool:
    """Whether every adaptive bin of `o` over `s` has one size, s // o (of a symbolic `s`,
    only where that holds for every value: `o` = 1)."""
    return o == 1 or isinstance(s, int) and o and s % o == 0


def _out_sizes(output_size, spatial, op):
    n = len(spatial)
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size,) * n
    sizes = tuple(output_size)
    if len(sizes) != n:
        raise ValueError(f"{op}: output_size must be an int or a {n}-tuple, got {output_size!r}")
    sizes = tuple(spatial[a] if sizes[a] is None else int(sizes[a]) for a in range(n))
    if min(sizes) < 0:
        raise ArgumentError(f"{op}: output_size must be non-negative, got {output_size!r}")
    return sizes


def global_mean_other_rank(x, n: int, output_size):
    """PyTorch's adaptive_avg_pool{n}d of an output of all ones is the mean over the last `n`
    dims, taken before its rank and size checks: an input of a rank other than n+1 or n+2,
    or with an empty dim, gives that mean with such an output (nan where empty). None
    otherwise; then an empty non-batch dim is refused, as there."""
    if x.ndim in (n + 1, n + 2) and all(d != 0 for d in x.shape[x.ndim - n:]):
        return None
    if isinstance(output_size, int):
        sizes = (output_size,) * n
    else:
        sizes = tuple(output_size)
        if len(sizes) != n or x.ndim <= n:
            return None   # (the rank check below names the problem)
        sizes = tuple(x.shape[x.ndim - n + i] if s is None else s for i, s in enumerate(sizes))
    if x.ndim < n or any(s != 1 for s in sizes):
        if x.ndim in (n + 1, n + 2) and not all(d != 0 for d in x.shape[-(n + 1) if x.ndim == n + 2 else 0:]):
            raise ShapeError(f"adaptive_avg_pool{n}d: expected input to have non-zero size for non-batch "
                             f"dims, got shape {tuple(x.shape)}")
        return None
    return mean(x, tuple(range(-n, 0)), keepdim=True)


def _adaptive_avg(input, output_size, *, n, op):
    if (out := widened(_adaptive_avg, input, output_size, n=n, op=op)) is not None:
        return out
    if n > 1:   # (PyTorch's 1-D pool checks the rank first)
        out = global_mean_other_rank(input, n, output_size)
        if out is not None:
            return out
    x, unbatched = _batched(input, n, op)
    spatial = tuple(x.shape[2:])
    outs = _out_sizes(output_size, spatial, op)
    if all(_equal_bins(s, o) for s, o in zip(spatial, outs)):   # a mean over each block
        blocks = sum(((o, s // o) for s, o in zip(spatial, outs)), ())
        out = mean(reshape(x, tuple(x.shape[:2]) + blocks), tuple(range(3, 3 + 2 * n, 2)))
    else:
        out = x
        for a in range(n):   # one averaging matrix per axis: separable
            w = avg_weights(spatial[a], outs[a], x.dtype, x.device)
            out = transpose(matmul(transpose(out, 2 + a, -1), w), 2 + a, -1)
    return squeeze(out, 0) if unbatched else out


def _adaptive_max(input, output_size, return_indices: bool = False, *, n, op, with_indices=False):
    x, unbatched = _batched(input, n, op)
    return_indices = return_indices or with_indices
    spatial = tuple(x.shape[2:])
    outs = _out_sizes(output_size, spatial, op)
    dev, per = _symbolic_on(x, spatial), []
    for a in range(n):
        start, end = _bins(spatial[a], outs[a], dev)
        # the widest bin (no bins when an output size is 0); of a symbolic size, a bound
        kmax = int((end - start).max(initial=1)) if dev is None else (spatial[a] - 1) // max(outs[a], 1) + 2
        pos = (start[:, None] + _index(kmax, dev)).clip(max=end[:, None] - 1)
        per.append((pos, pos >= 0))
    flat, valid, o = _combine(per, spatial)
    res = _max_windows(x, flat, valid, o, return_indices)
    if unbatched:
        res = tuple(squeeze(r, 0) for r in res) if return_indices else squeeze(res, 0)
    return res


adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d = (takes("input", op=f"adaptive_avg_pool{n}d")(
    _ranked(_adaptive_avg, n, f"adaptive_avg_pool{n}d")) for n in (1, 2, 3))
adaptive_max_pool1d, adaptive_max_pool3d = (takes("input", op=f"adaptive_max_pool{n}d")(
    _ranked(_adaptive_max, n, f"adaptive_max_pool{n}d")) for n in (1, 3))
adaptive_avg_pool3d, adaptive_max_pool3d = _autocast.fp32(adaptive_avg_pool3d), _autocast.fp32(adaptive_max_pool3d)
# (ops/spatial.py's adaptive_max_pool2d where the bins are not equal)
_adaptive_max2d = _ranked(_adaptive_max, 2, "adaptive_max_pool2d")
adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices = (
    _ranked(_adaptive_max, n, f"adaptive_max_pool{n}d_with_indices", with_indices=True) for n in (1, 2, 3))


# ---------------------------------------------------------------- L^p pooling
def _lp_pool(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False, *, n, op):
    k = _ntuple(kernel_size, n, "kernel_size", op)
    if isinstance(norm_type, (int, float)) and math.isinf(norm_type):
        # the limit p -> +-inf, as PyTorch takes it: the largest (smallest) |x| of a window
        sgn = 1.0 if norm_type > 0 else -1.0
        return _max_pool(_abs(input) * sgn, k, stride, 0, 1, ceil_mode, n=n, op=op) * sgn
    pooled = _avg_pool(input ** norm_type, k, stride, 0, ceil_mode, True, None, n=n, op=op)
    return (sign(pooled) * relu(_abs(pooled)) * float(math.prod(k))) ** (1.0 / norm_type)


lp_pool1d, lp_pool2d, lp_pool3d = (_ranked(_lp_pool, n, f"lp_pool{n}d") for n in (1, 2, 3))


# ---------------------------------------------------------------- unpooling
def _max_unpool(input, indices, kernel_size, stride=None, padding=0, output_size=None, *, n, op):
    x = input
    if tuple(indices.shape) != tuple(x.shape):
        raise ShapeError(f"{op}: indices of shape {tuple(indices.shape)} should match the input "
                         f"{tuple(x.shape)}")
    x, unbatched = _batched(x, n, op)
    indices = unsqueeze(indices, 0) if unbatched else indices
    k = _ntuple(kernel_size, n, "kernel_size", op)
    s = k if stride is None else _ntuple(stride, n, "stride", op)
    p = _ntuple(padding, n, "padding", op)
    spatial = tuple(x.shape[2:])
    default = tuple((spatial[a] - 1) * s[a] - 2 * p[a] + k[a] for a in range(n))
    if output_size is None:
        outs = default
    else:
        outs = tuple(int(v) for v in tuple(output_size)[-n:])
        for a in range(n):
            if not default[a] - s[a] < outs[a] < default[a] + s[a]:
                raise ValueError(f"{op}: output_size {tuple(output_size)} is not within a stride of "
                                 f"the default {default}")
    nb, c = x.shape[0], x.shape[1]
    total = int(np.prod(outs))
    idx = in_range(reshape(cast(indices, _dt.int64), (nb, c, int(np.prod(spatial)))), total, op)
    # a put, not an add: overlapping windows that chose the same element write it once
    base = zeros((nb, c, total), dtype=x.dtype, device=x.device)
    out = scatter(base, 2, idx, reshape(x, (nb, c, int(np.prod(spatial)))))
    out = reshape(out, (nb, c) + outs)
    return squeeze(out, 0) if unbatched else out


max_unpool1d, max_unpool2d, max_unpool3d = (_ranked(_max_unpool, n, f"max_unpool{n}d") for n in (1, 2, 3))
max_unpool2d, max_unpool3d = _autocast.fp32(max_unpool2d), _autocast.fp32(max_unpool3d)
