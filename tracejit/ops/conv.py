"""im2col (``unfold``) and col2im (``fold``) primitives, each the other's VJP.

Two column layouts: ``"batch"`` (N, C*kh*kw, L), PyTorch's ``F.unfold``, and ``"gemm"``
(C*kh*kw, N*L), the right operand of a convolution's one GEMM over all images, which saves
the transposing copies the "batch" layout needs (ops/conv_gemm.py uses it).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..shapes import Sym, as_dim
from .registry import Aval, defprim
from .eager import bind
from .shape_params import size_arg

__all__ = ["unfold", "fold", "conv_out_size", "unbatched"]


def conv_out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def unbatched(op: str, x, weight, rank: int, expected: str) -> bool:
    """Whether `x` is an `op` input of `rank` spatial dims without its batch dim (one dim
    fewer than `weight`: the caller runs it as a batch of one); other ranks raise."""
    if x.ndim == rank + 1 and weight.ndim == rank + 2:
        return True
    if x.ndim != rank + 2 or weight.ndim != rank + 2:
        raise ShapeError(f"{op}: expected {expected}, got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    return False


def _out_hw(h: int, w: int, kernel, stride, padding, dilation) -> tuple:
    return (conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0]),
            conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1]))


def _padded(xp, x, padding, fill=0):
    """(N, C, H, W) `x` with `padding` rows and columns of `fill` on each side (x itself
    without padding)."""
    ph, pw = padding
    if not (ph or pw):
        return x
    n, c, h, w = x.shape
    out = xp.full((n, c, h + 2 * ph, w + 2 * pw), fill, dtype=x.dtype)
    out[:, :, ph:ph + h, pw:pw + w] = x
    return out


def _unfold_rule(x, kernel, stride, padding, dilation, pad_value, layout="batch"):
    if x.ndim != 4:
        raise ShapeError(f"unfold: expected a 4-D input (N, C, H, W), got shape {x.shape}")
    n, c, h, w = x.shape
    oh, ow = _out_hw(h, w, kernel, stride, padding, dilation)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"unfold: kernel {kernel} with padding {padding} and dilation {dilation} is "
                         f"larger than the input of spatial size ({h}, {w})")
    if layout == "gemm":
        return Aval((c * kernel[0] * kernel[1], n * oh * ow), x.dtype, x.device)
    return Aval((n, c * kernel[0] * kernel[1], oh * ow), x.dtype, x.device)


def _windows(kernel, stride, dilation, oh, ow):
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r0, c0 = i * dilation[0], j * dilation[1]
            yield i, j, slice(r0, r0 + stride[0] * (oh - 1) + 1, stride[0]), \
                slice(c0, c0 + stride[1] * (ow - 1) + 1, stride[1])


def _unfold_impl(xp, x, kernel, stride, padding, dilation, pad_value, layout="batch"):
    n, c, h, w = x.shape
    oh, ow = _out_hw(h, w, kernel, stride, padding, dilation)
    kh, kw = kernel
    xpad = _padded(xp, x, padding, pad_value)
    # Every window at once as a strided view of the (padded) input, copied in one call:
    # 2.3x faster than kh*kw strided slice copies (rows of ow elements) for a 3x3 conv
    # over (64, 32, 13, 13). The view is only read, and never escapes.
    sn, sc, sh, sw = xpad.strides
    if layout == "gemm":
        rows = c * kh * kw
        cols = xp.empty((rows, n * oh * ow), dtype=x.dtype)
        if not (xp is np and _unfold_by_row_pitch(xpad, cols, kernel, stride, dilation, oh, ow)):
            windows = xp.lib.stride_tricks.as_strided(
                xpad, (c, kh, kw, n, oh, ow),
                (sc, sh * dilation[0], sw * dilation[1], sn, sh * stride[0], sw * stride[1]))
            cols.reshape(c, kh, kw, n, oh, ow)[...] = windows
        return cols
    windows = xp.lib.stride_tricks.as_strided(
        xpad, (n, c, kh, kw, oh, ow),
        (sn, sc, sh * dilation[0], sw * dilation[1], sh * stride[0], sw * stride[1]))
    cols = xp.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    cols[...] = windows
    return cols.reshape(n, c * kh * kw, oh * ow)


# Elements of `_unfold_by_row_pitch`'s scratch at most (a block of channels' cut rows:
# they stay in a core's L2 cache until the block's columns are copied out).
_UNFOLD_BLOCK = 1 << 17


def _unfold_by_row_pitch(xpad, cols, kernel, stride, dilation, oh, ow) -> bool:
    """unfold's "gemm" columns by long numpy copies, for a stride of 1 down the rows and
    windows narrower than the rows; False (the one strided copy runs) otherwise. Per column
    offset j the input's rows are first cut to the OW columns that offset reads, into a
    scratch of OW-long rows; then each (channel, offset, image) column run is one contiguous
    copy of OH*OW elements rather than OH copies of OW. By blocks of channels; the scratch
    is the last channel's column rows, so a cold call faults in no extra pages. Same values
    bit for bit (LeNet's conv2 unfold: 20% less time than the one strided copy)."""
    n, c, h, w = xpad.shape
    kh, kw = kernel
    if stride[0] != 1 or ow >= w or c < 2 or not cols.size:
        return False
    sn, sc, sh, sw = xpad.strides
    it = xpad.itemsize
    plane = h * ow                                      # a channel's rows cut to OW columns
    cb = min(c - 1, kh * oh // h, _UNFOLD_BLOCK // (kw * n * plane))
    if cb < 1:
        return False
    runs = cols[:c * kh * kw].reshape(c, kh, kw, n, oh * ow)
    scratch = runs[c - 1].reshape(-1)[:kw * n * cb * plane].reshape(kw, n, cb, plane)
    for c0 in range(0, c - 1, cb):
        k = min(c - 1, c0 + cb) - c0
        sb = scratch[:, :, :k]
        # sb[j, i_n, ch, y, s] = xpad[i_n, c0 + ch, y, j * dilation + s * stride]
        sb.reshape(kw, n, k, h, ow)[...] = np.lib.stride_tricks.as_strided(
            xpad[:, c0:], (kw, n, k, h, ow), (sw * dilation[1], sn, sc, sh, sw * stride[1]))
        # the window of (ch, i, j, image): rows i*dilation .. + OH of sb[j, image, ch]
        runs[c0:c0 + k] = np.lib.stride_tricks.as_strided(
            sb, (k, kh, kw, n, oh * ow),
            (sb.strides[2], ow * it * dilation[0], sb.strides[0], sb.strides[1], it))
    runs[c - 1].reshape(kh, kw, n, oh, ow)[...] = np.lib.stride_tricks.as_strided(
        xpad[:, c - 1], (kh, kw, n, oh, ow),
        (sh * dilation[0], sw * dilation[1], sn, sh * stride[0], sw * stride[1]))
    return True


# Elements of `_fold_by_row_pitch`'s scratch at most (a block of channels' row sums: they
# stay in a core's L2 cache while the block's column offsets are summed out of them).
_FOLD_BLOCK = 1 << 17


def _fold_by_row_pitch(cols, img, kernel, oh, ow) -> bool:
    """fold's "gemm" columns into `img`, the padded image as a C-contiguous (C, N, Hp, Wp)
    array, for a stride and dilation of 1, by numpy with long runs; False (the per-offset
    adds run) for windows wider than the output or non-C-contiguous columns. The per-offset
    adds run OW elements at a time; here the two offsets are summed apart, each where its
    runs are long:

    - rows first, in a scratch U[ch, j, image] of Hp rows of OW: kh adds of whole OH*OW
      column runs;
    - then the column offsets j over each channel's flat run, in place in U[ch, 0] (the
      2*(kw-1) edge columns, which fewer offsets reach, by strided adds first);
    - the middle columns go into img with one copy.

    By blocks of channels (`_FOLD_BLOCK`). The order of the adds differs from the
    per-offset form's: equal within float32 rounding. Sums start from +0.0."""
    kh, kw = kernel
    c, n, hp, wp = img.shape
    if ow < kw or not cols.size or not cols.flags.c_contiguous:
        return False
    lo, run, plane = kw - 1, oh * ow, hp * ow
    src = cols.reshape(c, kh, kw, n, run)
    cb = max(1, min(c, _FOLD_BLOCK // (kw * n * plane)))
    scratch = np.empty((cb, kw, n, plane), cols.dtype)
    for c0 in range(0, c, cb):
        k = min(c, c0 + cb) - c0
        u, s, o = scratch[:k], src[c0:c0 + k], img[c0:c0 + k]
        np.add(s[:, 0], 0, out=u[..., :run])          # + 0: a -0.0 term gives +0.0
        u[..., run:] = 0
        for i in range(1, kh):                        # window row i: image rows i .. i+OH-1
            u[..., i * ow:i * ow + run] += s[:, i]
        ur = u.reshape(k, kw, n, hp, ow)
        for x in range(lo):                           # left edge: offsets 0..x reach x
            o[..., x] = ur[:, 0, :, :, x]
            for j in range(1, x + 1):
                o[..., x] += ur[:, j, :, :, x - j]
        for x in range(ow, ow + lo):                  # right edge: offsets x-OW+1 .. kw-1
            o[..., x] = ur[:, x - ow + 1, :, :, ow - 1]
            for j in range(x - ow + 2, kw):
                o[..., x] += ur[:, j, :, :, x - j]
        uf = u.reshape(k, kw, n * plane)
        for j in range(1, kw):                        # the middle, in place in U[ch, 0]
            np.add(uf[:, 0, lo:], uf[:, j, lo - j:n * plane - j], out=uf[:, 0, lo:])
        o[..., lo:ow] = ur[:, 0, :, :, lo:ow]
    return True


def _tiles(kernel, stride, dilation) -> bool:
    """Do the windows sit side by side, neither overlapping nor leaving gaps between them?"""
    return tuple(stride) == tuple(kernel) and tuple(dilation) == (1, 1)


def fold_count(cols, output_size, kernel, stride, padding, dilation, layout):
    """(N, C) of the image that columns `cols` fold into."""
    if layout == "gemm":
        ckk, nl = cols.shape
        oh, ow = _out_hw(*output_size, kernel, stride, padding, dilation)
        return nl // (oh * ow), ckk // (kernel[0] * kernel[1])
    n, ckk, _ = cols.shape
    return n, ckk // (kernel[0] * kernel[1])


def _fold_rule(cols, output_size, kernel, stride, padding, dilation, layout="batch"):
    if layout == "gemm":
        oh, ow = _out_hw(*output_size, kernel, stride, padding, dilation)
        kk = kernel[0] * kernel[1]
        if cols.ndim != 2 or oh <= 0 or ow <= 0 or cols.shape[1] % (oh * ow) or cols.shape[0] % kk:
            raise ShapeError(f"fold: columns of shape {cols.shape} in 'gemm' layout should be "
                             f"(C*{kk}, N*{max(oh, 0) * max(ow, 0)}) for output size {output_size}")
    n, c = fold_count(cols, output_size, kernel, stride, padding, dilation, layout)
    return Aval((n, c) + tuple(output_size), cols.dtype, cols.device)


def _fold_impl(xp, cols, output_size, kernel, stride, padding, dilation, layout="batch"):
    n, c = fold_count(cols, output_size, kernel, stride, padding, dilation, layout)
    (h, w), (ph, pw), (kh, kw) = output_size, padding, kernel
    oh, ow = _out_hw(h, w, kernel, stride, padding, dilation)
    if layout == "gemm":
        # Into a channel-major image (the order the column rows come in): for a stride of
        # 1 by `_fold_by_row_pitch`, else by one add per offset.
        if xp is np and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1):
            img = np.empty((c, n, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
            if _fold_by_row_pitch(cols, img, kernel, oh, ow):
                return img.transpose(1, 0, 2, 3)[:, :, ph:ph + h, pw:pw + w]
        cols = cols.reshape(c, kh, kw, n, oh, ow).transpose(3, 0, 1, 2, 4, 5)
        out = xp.zeros((c, n, h + 2 * ph, w + 2 * pw), dtype=cols.dtype).transpose(1, 0, 2, 3)
    else:
        cols = cols.reshape(n, c, kh, kw, oh, ow)
        if _tiles(kernel, stride, dilation) and (ph, pw) == (0, 0) and (oh * kh, ow * kw) == (h, w):
            # Windows tile the whole output (pooling's gradient): each element comes from
            # exactly one column entry, so plain copies, no zeros, no sums. (Per window:
            # faster here than one permuting copy, whose innermost run is kw elements.)
            out = xp.empty((n, c, h, w), dtype=cols.dtype)
            for i, j, rs, cs in _windows(kernel, stride, dilation, oh, ow):
                out[:, :, rs, cs] = cols[:, :, i, j]
            return out
        out = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for i, j, rs, cs in _windows(kernel, stride, dilation, oh, ow):
        out[:, :, rs, cs] += cols[:, :, i, j]
    return out[:, :, ph:ph + h, pw:pw + w]


def _unfold_vjp(g, out, x, kernel, stride, padding, dilation, pad_value, layout="batch"):
    return (fold(g, tuple(x.shape[2:]), kernel, stride, padding, dilation, layout),)


UNFOLD = defprim("unfold", _unfold_impl, _unfold_rule, _unfold_vjp, kind="other",
                 save=lambda rq: (), extra={"meta": (0,), "selects": True})
FOLD = defprim("fold", _fold_impl, _fold_rule,
               lambda g, out, cols, output_size, kernel, stride, padding, dilation, layout="batch": (
                   unfold(g, kernel, stride, padding, dilation, layout=layout),),
               kind="other", save=lambda rq: ())


def _ntuple(v, n: int, what: str, op: str) -> tuple:
    """An int or a 1- or n-sequence as an n-tuple (PyTorch's pools take a 1-tuple too)."""
    if _ints(v, n):   # (the common call, without a generator and a call per item)
        return v if type(v) is tuple else (v,) * n
    if isinstance(v, (int, np.integer, Sym)):
        return (as_dim(v),) * n
    t = tuple(as_dim(e) for e in v)   # (a size may be symbolic: fold's, unfold's gradient)
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise ValueError(f"{op}: {what} must be an int or a {n}-tuple, got {v!r}")
    return t


def _ints(v, n: int) -> bool:
    """Whether `v` is a Python int or an n-tuple of them (bool excluded: refused or cast
    where the general path handles it)."""
    if type(v) is int:
        return True
    if type(v) is not tuple or len(v) != n:
        return False
    for e in v:
        if type(e) is not int:
            return False
    return True


def _pair(v, what: str = "argument", op: str = "pair"):
    return _ntuple(v, 2, what, op)


_LAYOUTS = ("batch", "gemm")


def unfold(x, kernel_size, stride=1, padding=0, dilation=1, pad_value=0.0, layout: str = "batch"):
    """im2col: (N, C*kh*kw, L) columns, or (C*kh*kw, N*L) with ``layout="gemm"``."""
    if layout not in _LAYOUTS:
        raise ValueError(f"unfold: layout must be one of {_LAYOUTS}, got {layout!r}")
    params = dict(kernel=_pair(kernel_size, "kernel_size", "unfold"), stride=_pair(stride, "stride", "unfold"),
                  padding=_pair(padding, "padding", "unfold"), dilation=_pair(dilation, "dilation", "unfold"),
                  pad_value=float(pad_value))
    if layout != "batch":   # the default stays out of the params (and of existing IR text)
        params["layout"] = layout
    return bind(UNFOLD, x, **params)


def fold_size(output_size):
    """fold's output size with each traced int in it read as a size (`size_arg`): a
    changing int argument is then a symbolic size, not a value captured once per size."""
    if isinstance(output_size, (tuple, list)):
        return tuple(e if type(e) is int else size_arg(e) for e in output_size)
    return output_size if type(output_size) is int else size_arg(output_size)


def fold(cols, output_size, kernel_size, stride=1, padding=0, dilation=1, layout: str = "batch"):
    """col2im, summing overlaps: columns in `unfold`'s `layout` back to (N, C, H, W)."""
    if layout not in _LAYOUTS:
        raise ValueError(f"fold: layout must be one of {_LAYOUTS}, got {layout!r}")
    params = dict(output_size=_pair(fold_size(output_size), "output_size", "fold"),
                  kernel=_pair(kernel_size, "kernel_size", "fold"), stride=_pair(stride, "stride", "fold"),
                  padding=_pair(padding, "padding", "fold"), dilation=_pair(dilation, "dilation", "fold"))
    if layout != "batch":
        params["layout"] = layout
    return bind(FOLD, cols, **params)
