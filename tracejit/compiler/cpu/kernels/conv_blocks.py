"""The CPU implementations of ops/conv_gemm.py's primitives, by blocks of images.

Whole-batch im2col wrote every image's columns to memory before one GEMM read them back
(17 GFLOP/s on one core, against 45 for columns in L2). Here a block of images is made by
the im2col kernel and used by the GEMM while in cache (in L3 where an image is too little
work to pay a block's Python, `block_images`), blocks shared over the cores: forward W @
columns into the NCHW result, weight gradient columns @ gradient rows^T summed per thread,
input gradient W^T @ gradient rows folded by col2im. A 1x1 kernel with stride 1 and no
padding takes the images' own rows for columns (over images of few positions, one product
over the batch's channel-major rows); few output channels over long rows take the direct
kernel of conv_direct.py (no columns). With groups each block's product is batched over
them, a group's slice of the column rows and of the weight's (ops/conv_gemm.py). None
(the numpy form runs) while the im2col/col2im kernel is not loaded. Each product runs as
the measured GEMM choice makes it for its shape on the block's threads (gemm/products.py
`product_into`): numpy's OpenBLAS may run AVX2 code on an AVX-512 machine, where the
template's was 1.6x faster on a 32x512 by 512x2052 product.
"""
from __future__ import annotations

import threading

import numpy as np

from ....machine import L2_BYTES
from ....ops.conv import conv_out_size
from ....ops.conv_gemm import CONV2D_GEMM, CONV2D_WGRAD, CONV2D_XGRAD, by_group
from ....threads import blas_threads_set
from ..gemm.products import product_into
from ..runtime import coreshare as _coreshare, sharepool as _sharepool
from .conv_direct import direct_call, direct_fits, direct_forward
from .conv_kernels import col2im_kernel, im2col_kernel, table_form

__all__ = ["forward", "wgrad", "xgrad", "forward_call", "xgrad_call", "wgrad_call"]

# Bytes of a block's columns at most: a core's L2 (512 KB here), so the GEMM reads them
# from it while the weight and the block's output stream past.
_BLOCK_BYTES = L2_BYTES
# Multiply-adds a block does at least, its columns then spilling to L3 (up to
# `_BLOCK_MAX_BYTES`): each block costs some 15 us of Python (allocation, the product's
# choice and launch) holding the GIL, and the threads of a split wait for each other's
# (one image a block of a 16-channel 32x32 layer: two threads were no faster than one).
_BLOCK_MIN_WORK = 1 << 23
_BLOCK_MAX_BYTES = 4 * L2_BYTES


def _out_hw(h, w, kernel, stride, padding, dilation) -> tuple:
    return (conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0]),
            conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1]))


def block_images(n: int, per_image: int, work: int, cpus: int) -> int:
    """Images per block: as many as `_BLOCK_BYTES` of columns hold, or more where a block
    would then do fewer than `_BLOCK_MIN_WORK` multiply-adds, at most `_BLOCK_MAX_BYTES`
    of columns; at most an even share of the batch over `cpus`."""
    fit = _BLOCK_BYTES // max(per_image, 1)
    amortise = min(-(-_BLOCK_MIN_WORK * n // max(work, 1)), _BLOCK_MAX_BYTES // max(per_image, 1))
    return max(1, min(n, max(fit, amortise), -(-n // max(cpus, 1))))


def _blocks(fn, n: int, per_image: int, work: int) -> None:
    """``fn(s, e, nb)`` over image blocks [s, e) of `block_images` images, split over the
    cores with BLAS on one thread; one block alone keeps BLAS's threads."""
    nb = block_images(n, per_image, work, _coreshare.core_share.cpus)
    if nb >= n:     # one block: on this thread, BLAS's threads as they are
        fn(0, n, nb)
        return
    count = -(-n // nb)

    def blocks(b0: int, b1: int) -> None:
        for b in range(b0, b1):
            fn(b * nb, min(n, (b + 1) * nb), nb)

    def part(b0: int, b1: int) -> None:
        if b0 == 0 and b1 == count > 1:     # all on the caller's thread: BLAS's one thread too
            with blas_threads_set(1):
                blocks(b0, b1)
        else:                               # a share (split sets BLAS to one thread), or one block
            blocks(b0, b1)
    _sharepool.split(part, count, work)


# A column element made or folded costs about what this many multiply-adds of a product
# do (one thread: some 7 elements a ns against some 50 GMAC/s): the work `sharepool.split`
# weighs for a split of im2col or col2im over channels.
_COLUMN_WORK = 16


def _by_channels(run, c: int, elements: int, one_block: bool) -> None:
    """``run(c0, c1)`` (im2col or col2im over input channels c0..c1-1) split over the cores
    where the batch is one block (a batch of one: no blocks run beside it), else here."""
    if one_block:
        _sharepool.split(run, c, elements * _COLUMN_WORK)
    else:
        run(0, c)


def _threads(n: int, nb: int) -> int:
    """The threads a block's products run on: one where the batch is cut into blocks (each
    share's BLAS then runs on one thread), else 0, those the machine gives now."""
    return 1 if nb < n else 0


def _rows(g, s: int, e: int, buf):
    """Images s..e-1 of g (N, O, OH, OW) as the GEMM's (O, (e-s)*OH*OW) rows: a view where
    g is channel-major ((O, N, ...) memory, BatchNorm's input gradient) or the block is one
    C-contiguous image, else copied into `buf` (in cache: a block, not the batch)."""
    o, m = g.shape[1], (e - s) * g.shape[2] * g.shape[3]
    gt = g.transpose(1, 0, 2, 3)
    if gt.flags.c_contiguous:
        return gt[:, s:e].reshape(o, m)
    if e - s == 1 and g[s].flags.c_contiguous:
        return g[s].reshape(o, m)
    rows = buf[:o * m].reshape(o, m)
    rows.reshape(o, e - s, -1)[...] = g[s:e].reshape(e - s, o, -1).transpose(1, 0, 2)
    return rows


def _image(x, s: int, e: int):
    """Images s..e-1 of x C-contiguous (a view of a C-contiguous x; a block's copy of a
    channel-major one, in cache, instead of the whole batch's)."""
    return np.ascontiguousarray(x[s:e])


def _pointwise(kernel, stride, padding) -> bool:
    """A 1x1 kernel, stride 1, no padding: an image's columns are its own (C, H*W) rows."""
    return tuple(kernel) == (1, 1) and tuple(stride) == (1, 1) and tuple(padding) == (0, 0)


# Positions per image below which a 1x1 convolution runs as one product over the batch's
# channel-major rows (a view at one position, else a copy) rather than a product per image:
# per image its columns are L wide (a squeeze-and-excitation layer's L = 1, a batch of
# outer products in numpy's batched matmul). Up to 7x7
# images: a product per image of 49 columns leaves the last one to a one-column tile
# (32 images of 128 channels at 7x7, one thread: forward ~40% less time as one product).
_SHORT_IMAGE = 64


def _channel_rows(a):
    """(N, C, L) -> (C, N*L): a view where L or N is 1, else a copy."""
    n, c, l = a.shape
    return a.transpose(1, 0, 2).reshape(c, n * l)


def _to_images(res, outr) -> None:
    """(C, N*L) rows into the (N, C, L) `outr`."""
    outr.transpose(1, 0, 2)[...] = res.reshape(outr.shape[1], outr.shape[0], outr.shape[2])


# Whether few output channels take conv_direct.py's kernel (its rule: `direct_fits`).
_DIRECT = True


# Column strides from which a convolution may run over its input's phases (`_phases`): at
# stride 2 a gather still uses half of each cache line, and the split's copies cost more
# (a 4-tap window at stride 2 over 200 columns: the input gradient ~35% slower split).
_SPLIT_STRIDE = 4


def _phases(kernel, stride, dilation, ow: int) -> tuple | None:
    """Per spatial dim (phases kept, taps per phase) where a convolution strided along its
    rows runs as one of stride 1 over its input's phases (tap t*s + r of the window reads
    phase r, position t): a stride that divides the window, or is wider than it (the
    phases past the window never read), without dilation, over output rows `ow` long
    enough for im2col's runs form, at a column stride of `_SPLIT_STRIDE` or more; else None.
    The phases stack into the channels, so im2col copies contiguous runs rather than
    gathering every s-th element (an 80-tap window at stride 16 over one channel: 1.36 ->
    0.30 ms). Shorter rows keep the table form (4x4 windows at stride 2 over 8 columns)."""
    if (stride[1] < _SPLIT_STRIDE or table_form(stride, ow) or tuple(dilation) != (1, 1)
            or any(k > s and k % s for k, s in zip(kernel, stride))):
        return None
    return tuple((min(s, k), -(-k // s)) for k, s in zip(kernel, stride))


def _split(x, stride, padding, out_hw, phases):
    """x (N, C, H, W) padded and cut into its phases: (N, C*Ph*Pw, Qh, Qw), phase (r, q) of
    channel c at c*Ph*Pw + r*Pw + q, its position (i, j) padded x's (i*sh + r, j*sw + q).
    A weight (O, C, kh, kw) with no padding and `out_hw` (1, 1): the stride-1 weight."""
    n, c, h, w = x.shape
    (sh, sw), (ph, pw) = stride, padding
    (rh, th), (rw, tw) = phases
    qh, qw = out_hw[0] + th - 1, out_hw[1] + tw - 1
    if ph == pw == 0 and qh * sh <= h and qw * sw <= w:     # no padding to add: a view
        xp = x[:, :, :qh * sh, :qw * sw]
    else:
        xp = np.zeros((n, c, qh * sh, qw * sw), x.dtype)
        hh, ww = min(h, qh * sh - ph), min(w, qw * sw - pw)
        xp[:, :, ph:ph + hh, pw:pw + ww] = x[:, :, :hh, :ww]
    xs = xp.reshape(n, c, qh, sh, qw, sw).transpose(0, 1, 3, 5, 2, 4)[:, :, :rh, :rw]
    return np.ascontiguousarray(xs).reshape(n, c * rh * rw, qh, qw)


def _merge(xs, c: int, input_hw, stride, padding, phases):
    """`_split`'s adjoint for a gradient (N, C*Ph*Pw, Qh, Qw) -> (N, C, H, W): each phase's
    positions back to the padded image's, the padding cut off (a weight's: no padding)."""
    n, _, qh, qw = xs.shape
    (sh, sw), (ph, pw), ((rh, _), (rw, _)) = stride, padding, phases
    h, w = input_hw
    xp = np.zeros((n, c, max(qh * sh, ph + h), max(qw * sw, pw + w)), xs.dtype)
    xp[:, :, :qh * sh, :qw * sw].reshape(n, c, qh, sh, qw, sw)[:, :, :, :rh, :, :rw] = \
        xs.reshape(n, c, rh, rw, qh, qw).transpose(0, 1, 4, 2, 5, 3)
    return np.ascontiguousarray(xp[:, :, ph:ph + h, pw:pw + w])


_FLOATS = (np.float32, np.float64)   # the dtypes the kernels are typed for
_UNIT = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1))


def _split_weight(w, stride, phases):
    return _split(w, stride, (0, 0), (1, 1), phases)


def _one_product(kernel, stride, padding, l: int, groups: int) -> bool:
    """Whether a 1x1 convolution runs as one product over the batch's channel-major rows:
    over short images (`_SHORT_IMAGE`), or with groups (a product per image and group
    would be a 4-D batch)."""
    return _pointwise(kernel, stride, padding) and (l < _SHORT_IMAGE or groups > 1)


def forward(x, w, *b, kernel, stride, padding, dilation, groups=1):
    out_hw = _out_hw(x.shape[2], x.shape[3], kernel, stride, padding, dilation)
    phases = _phases(kernel, stride, dilation, out_hw[1])
    if phases:
        ws = _split_weight(w, stride, phases)
        return forward(_split(x, stride, padding, out_hw, phases), ws, *b, kernel=ws.shape[2:], groups=groups,
                       **_UNIT)
    n, c, h, wd = x.shape
    o = w.shape[0]
    oh, ow = out_hw
    w2 = by_group(np.ascontiguousarray(w.reshape(o, -1)), groups)
    k, l, (kh, kw) = c * kernel[0] * kernel[1], oh * ow, kernel
    work = o * (k // groups) * l * n
    bias = b[0].reshape(o, 1) if b else None
    out = np.empty((n, o, oh, ow), x.dtype)
    outr = out.reshape(n, o, l)
    if _one_product(kernel, stride, padding, l, groups):
        _to_images(product_into(w2, by_group(_channel_rows(x.reshape(n, c, l)), groups)), outr)
        if bias is not None:
            outr += bias
        return out
    if _pointwise(kernel, stride, padding):
        def block(s: int, e: int, nb: int) -> None:
            product_into(w2, x[s:e].reshape(e - s, c, l), outr[s:e], _threads(n, nb))
            if bias is not None:
                outr[s:e] += bias
        _blocks(block, n, k * l * x.itemsize, work)
        return out
    if _DIRECT and groups == 1 and direct_fits(o, stride, ow):
        res = direct_forward(x, w, bias, kernel, stride, padding, dilation, oh, ow, _blocks)
        if res is not None:
            return res
    fn = im2col_kernel(x.dtype.name, kernel, stride, padding, dilation, ow)
    if fn is None:
        return None

    def block(s: int, e: int, nb: int) -> None:
        m = (e - s) * l
        cols, img = np.empty((k, m), x.dtype), _image(x, s, e)
        _by_channels(lambda c0, c1: fn(img, cols, oh, ow, 0.0, c0, c1, kh, kw), c, cols.size, nb >= n)
        t = _threads(n, nb)
        if e - s == 1:      # straight into the image's (O, L) rows
            product_into(w2, by_group(cols, groups), by_group(outr[s], groups), t)
        else:
            # one GEMM over the block's columns and a copy into place: a GEMM per image of
            # L columns ran at half the speed where L is short
            res = product_into(w2, by_group(cols, groups), None, t)
            outr[s:e].transpose(1, 0, 2)[...] = res.reshape(o, e - s, l)
        if bias is not None:        # the block's output still in cache
            outr[s:e] += bias
    _blocks(block, n, k * l * x.itemsize, work)
    return out


def wgrad(g, x, kernel, stride, padding, dilation, bias=False, groups=1):
    phases = _phases(kernel, stride, dilation, g.shape[3])
    if phases:
        c, o = x.shape[1] // groups, g.shape[1]
        taps = tuple(t for _, t in phases)
        xs = _split(x, stride, padding, g.shape[2:], phases)
        rec = wgrad(g, xs, taps, bias=bias, groups=groups, **_UNIT)
        if rec is None:
            return None
        dw = _merge(rec[:o * xs.shape[1] // groups * taps[0] * taps[1]].reshape(o, -1, *taps), c, kernel,
                    stride, (0, 0), phases)
        return np.concatenate([dw.reshape(-1), rec[rec.size - o:]]) if bias else dw
    n, c, h, wd = x.shape
    o, (oh, ow) = g.shape[1], g.shape[2:]
    pointwise = _pointwise(kernel, stride, padding)
    fn = None if pointwise else im2col_kernel(x.dtype.name, kernel, stride, padding, dilation, ow)
    if fn is None and not pointwise:
        return None
    kh, kw = kernel
    k, l = c * kh * kw, oh * ow
    sums: dict = {}     # thread -> its blocks' sums: (K, O) (by group (G, K/G, O/G)), (O,) with `bias`
    if _one_product(kernel, stride, padding, l, groups):     # one product over the batch's positions
        gr = _channel_rows(g.reshape(n, o, l))
        sums[0] = [product_into(by_group(_channel_rows(x.reshape(n, c, l)), groups),
                                np.swapaxes(by_group(gr, groups), -1, -2)), gr.sum(1) if bias else None]

    def block(s: int, e: int, nb: int) -> None:
        if pointwise:    # the images' own rows: sum of x[i] g[i]^T
            gi = g[s:e].reshape(e - s, o, l)
            part = product_into(x[s:e].reshape(e - s, c, l), gi.transpose(0, 2, 1), None, _threads(n, nb))
            part = part.sum(0) if e - s > 1 else part[0]
            db = gi.sum((0, 2)) if bias else None
        else:
            part, db = _columns_wgrad(fn, g, x, s, e, kernel, groups, bias, _threads(n, nb))
        acc = sums.setdefault(threading.get_ident(), [part, db])
        if acc[0] is not part:
            acc[0] += part
            if bias:
                acc[1] += db
    if not sums:
        _blocks(block, n, k * l * x.itemsize, o * (k // groups) * l * n)
    parts = list(sums.values())
    dw, db = parts[0]
    for part, pb in parts[1:]:
        dw += part
        if bias:
            db += pb
    return _wgrad_record(dw, db, o, c, kernel, groups)


def _columns_wgrad(fn, g, x, s: int, e: int, kernel, groups: int, bias: bool, threads: int) -> tuple:
    """Images s..e-1's (K, O) weight gradient (by group (G, K/G, O/G)) by im2col kernel `fn`
    and a product on `threads` (0: the batch is one block, its im2col split over the cores
    too), with their bias gradient (O,) or None."""
    c, o, (oh, ow), (kh, kw) = x.shape[1], g.shape[1], g.shape[2:], kernel
    m = (e - s) * oh * ow
    cols, img = np.empty((c * kh * kw, m), x.dtype), _image(x, s, e)
    _by_channels(lambda c0, c1: fn(img, cols, oh, ow, 0.0, c0, c1, kh, kw), c, cols.size, threads == 0)
    rows = _rows(g, s, e, np.empty(o * m, g.dtype))
    # (cols g^T)^T: BLAS's M the K column rows, not the O output channels (ResNet's first stage: 16)
    part = product_into(by_group(cols, groups), np.swapaxes(by_group(rows, groups), -1, -2), None, threads)
    return part, (rows.sum(1) if bias else None)


def _wgrad_record(dw, db, o: int, c: int, kernel, groups: int):
    """The weight gradient (O, C/G, kh, kw) from the summed (K, O) (by group) `dw`; with a
    bias gradient `db`, both in one record: dw's elements, then db's."""
    dw, kg = np.swapaxes(dw, -1, -2), c * kernel[0] * kernel[1] // groups     # (O, K/G), by group
    if db is None:
        return np.ascontiguousarray(dw).reshape(o, c // groups, *kernel)
    rec = np.empty(o * kg + o, dw.dtype)
    rec[:o * kg].reshape(dw.shape)[...] = dw
    rec[o * kg:] = db
    return rec


# Output channels below which the input gradient may run as a forward convolution: W^T g's
# GEMM sums over O alone, short for BLAS under this (at 64 and 128 channels the col2im form
# was as fast or faster, e.g. 128 -> 128 at 8x8 over batch 32: 10.5 against 13.5 ms).
_AS_FORWARD_O = 64


def _as_forward(o: int, c: int, w: int, kernel, stride, padding, dilation) -> bool:
    """Whether the input gradient runs as a forward convolution of the gradient: at unit
    stride, with padding within the window's reach, fewer than `_AS_FORWARD_O` output
    channels and no more than input channels, input rows `w` long enough for im2col's runs form
    (with its table form, 4 columns, the col2im form won). Its columns are O*kh*kw rows
    instead of the C*kh*kw that W^T g makes for col2im, and its GEMM sums over O*kh*kw, not
    over O alone (U-Net's 16 -> 8 layer at 64x64: ~2x faster)."""
    return (tuple(stride) == (1, 1) and o <= c and o < _AS_FORWARD_O and not table_form(stride, w)
            and all(p <= d * (k - 1) for k, p, d in zip(kernel, padding, dilation)))


def xgrad(g, w, input_hw, kernel, stride, padding, dilation, groups=1):
    phases = _phases(kernel, stride, dilation, g.shape[3])
    if phases:
        ws = _split_weight(w, stride, phases)
        q = tuple(o + t - 1 for o, (_, t) in zip(g.shape[2:], phases))
        dxs = xgrad(g, ws, q, ws.shape[2:], groups=groups, **_UNIT)
        return None if dxs is None else _merge(dxs, w.shape[1] * groups, input_hw, stride, padding, phases)
    n, o, oh, ow = g.shape
    c = w.shape[1] * groups
    h, wd = input_hw
    if not _pointwise(kernel, stride, padding) and _as_forward(o, c, wd, kernel, stride, padding, dilation):
        # dx = g convolved with the flipped, transposed weight over the window's reach less
        # the padding: each input pixel's sum over the outputs its windows touched (by group:
        # group g's (O/G, C/G) filters transposed)
        wf = w.reshape((groups, o // groups, c // groups) + tuple(kernel)).transpose(0, 2, 1, 3, 4)
        wf = np.ascontiguousarray(wf[..., ::-1, ::-1]).reshape((c, o // groups) + tuple(kernel))
        pad = tuple(d * (k - 1) - p for k, p, d in zip(kernel, padding, dilation))
        return forward(g, wf, kernel=kernel, stride=stride, padding=pad, dilation=dilation, groups=groups)
    wt = np.swapaxes(by_group(w.reshape(o, -1), groups), -1, -2)
    kh, kw = kernel
    k, l = c * kh * kw, oh * ow
    if _pointwise(kernel, stride, padding):
        dx = np.empty((n, c, h, wd), g.dtype)
        dxr = dx.reshape(n, c, l)
        if _one_product(kernel, stride, padding, l, groups):
            _to_images(product_into(wt, by_group(_channel_rows(g.reshape(n, o, l)), groups)), dxr)
            return dx
        _blocks(lambda s, e, nb: product_into(wt, g[s:e].reshape(e - s, o, l), dxr[s:e], _threads(n, nb)), n,
                k * l * g.itemsize, o * k * l * n)
        return dx
    fn, rows = col2im_kernel(g.dtype.name, kernel, stride, padding, dilation, ow)
    if fn is None:
        return None
    dx = (np.empty if rows else np.zeros)((n, c, h, wd), g.dtype)

    def block(s: int, e: int, nb: int) -> None:
        m = (e - s) * l
        cols = product_into(wt, by_group(_rows(g, s, e, np.empty(o * m, g.dtype)), groups), None,
                            _threads(n, nb)).reshape(k, m)
        img = dx[s:e]
        if rows:
            _by_channels(lambda c0, c1: fn(cols, img, oh, ow, c0, c1, kh, kw), c, cols.size, nb >= n)
        else:
            _by_channels(lambda c0, c1: fn(cols, img, oh, ow, c0, c1), c, cols.size, nb >= n)
    _blocks(block, n, k * l * g.itemsize, o * (k // groups) * l * n)
    return dx


# ---------------------------------------------------------------- a plan's call for a signature
def _direct_route(x_shape, w_shape, dtype, kernel, stride, padding, dilation, groups: int = 1):
    """`direct_call` bound to a forward signature that `forward` runs by the direct kernel,
    else None."""
    out_hw = _out_hw(x_shape[2], x_shape[3], kernel, stride, padding, dilation)
    if (not _DIRECT or groups != 1 or _phases(kernel, stride, dilation, out_hw[1])
            or _pointwise(kernel, stride, padding) or not direct_fits(w_shape[0], stride, out_hw[1])):
        return None
    return direct_call(x_shape, w_shape, dtype, kernel, stride, padding, dilation, *out_hw, _blocks)


def _unbound(call, prim, params: dict):
    """`call`, or while its kernel is not loaded (None) the table's call of `prim`."""
    fallback = prim.dispatch

    def run(*arrays):
        out = call(*arrays)
        return fallback(np, *arrays, **params) if out is None else out
    return run


def forward_call(shapes, dtype, params):
    """A plan's call for one signature of CONV2D_GEMM: the direct kernel's, its geometry
    worked out once (a tiny convolution's ~10 us of Python a call), where `forward` takes
    that route; else None (the table per call)."""
    if len(shapes) not in (2, 3) or None in shapes or np.dtype(dtype).type not in _FLOATS:
        return None
    call = _direct_route(shapes[0], shapes[1], dtype, **params)
    if call is None:
        return None
    return _unbound(call, CONV2D_GEMM, params)


def xgrad_call(shapes, dtype, params):
    """A plan's call for one signature of CONV2D_XGRAD (no groups) that `xgrad` runs as a
    forward convolution by the direct kernel (`forward_call`); else None."""
    if len(shapes) != 2 or None in shapes or np.dtype(dtype).type not in _FLOATS:
        return None
    (n, o, oh, ow), w = shapes
    kernel, stride, padding, dilation = (params[k] for k in ("kernel", "stride", "padding", "dilation"))
    c = w[1]
    if (params.get("groups", 1) != 1 or _phases(kernel, stride, dilation, ow) or _pointwise(kernel, stride, padding)
            or not _as_forward(o, c, params["input_hw"][1], kernel, stride, padding, dilation)):
        return None
    pad = tuple(d * (k - 1) - p for k, p, d in zip(kernel, padding, dilation))
    call = _direct_route(shapes[0], (c, o) + tuple(kernel), dtype, kernel, stride, pad, dilation)
    if call is None:
        return None
    # the flipped, transposed weight (`xgrad`'s), copied into the kernel's tiles by `call`
    return _unbound(lambda g, w: call(g, w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]), CONV2D_XGRAD, params)


def wgrad_call(shapes, dtype, params):
    """A plan's call for one signature of CONV2D_WGRAD that `wgrad` runs by im2col (no
    phases, not 1x1) as one block (`block_images` on the process's fixed cores): that
    block's columns and product, the route worked out once; else None."""
    if len(shapes) != 2 or None in shapes or np.dtype(dtype).type not in _FLOATS:
        return None
    (n, o, oh, ow), (_, c, _, _) = shapes
    kernel, stride, padding, dilation = (params[k] for k in ("kernel", "stride", "padding", "dilation"))
    bias, groups = params.get("bias", False), params.get("groups", 1)
    if _phases(kernel, stride, dilation, ow) or _pointwise(kernel, stride, padding):
        return None
    k, dt = c * kernel[0] * kernel[1], np.dtype(dtype)
    if block_images(n, k * oh * ow * dt.itemsize, o * (k // groups) * oh * ow * n, _coreshare.core_share.cpus) < n:
        return None
    fallback, name = CONV2D_WGRAD.dispatch, dt.name

    def call(g, x):
        fn = im2col_kernel(name, kernel, stride, padding, dilation, ow)
        if fn is None:
            return fallback(np, g, x, **params)
        return _wgrad_record(*_columns_wgrad(fn, g, x, 0, n, kernel, groups, bias, 0), o, c, kernel, groups)
    return call
