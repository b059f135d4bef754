"""im2col (``unfold``) and col2im (``fold``) primitives, each the other's VJP.

Convolution is a composite over these plus matmul, so it gets gradients and tracing for
free and the heavy lifting goes to BLAS.

Two column layouts: ``"batch"`` (N, C*kh*kw, L), PyTorch's ``F.unfold``, and ``"gemm"``
(C*kh*kw, N*L), the right operand of the convolution's one GEMM over all images. conv2d
uses "gemm": in "batch" layout the columns were copied once to build and once more
(transposed, 8.9 MB for LeNet's second conv) for the GEMM, and the backward made the
same transposing copy of the GEMM's column gradient before col2im.

``"gemm_bias"`` is "gemm" with one more row, of ones, last: a convolution with a bias
appends the bias to the weight as its last column, so the GEMM adds it (no pass over the
output to add it) and the weight-gradient GEMM gives its gradient (the ones row's
products: no reduction over the output gradient). Its VJP folds the column gradient's
"gemm" rows (a contiguous view) and drops the ones row's.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..compiler.cpu.runtime import sharepool as _sharepool
from .registry import Aval, bind, defprim

__all__ = ["unfold", "fold", "conv_out_size"]


def conv_out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _unfold_rule(x, kernel, stride, padding, dilation, pad_value, layout="batch"):
    if x.ndim != 4:
        raise ShapeError(f"unfold: expected a 4-D input (N, C, H, W), got shape {x.shape}")
    n, c, h, w = x.shape
    oh = conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"unfold: kernel {kernel} with padding {padding} and dilation {dilation} is "
                         f"larger than the input of spatial size ({h}, {w})")
    if layout in ("gemm", "gemm_bias"):
        return Aval((c * kernel[0] * kernel[1] + (layout == "gemm_bias"), n * oh * ow), x.dtype,
                    x.device)
    return Aval((n, c * kernel[0] * kernel[1], oh * ow), x.dtype, x.device)


def _windows(kernel, stride, dilation, oh, ow):
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r0, c0 = i * dilation[0], j * dilation[1]
            yield i, j, slice(r0, r0 + stride[0] * (oh - 1) + 1, stride[0]), \
                slice(c0, c0 + stride[1] * (ow - 1) + 1, stride[1])


def _unfold_impl(xp, x, kernel, stride, padding, dilation, pad_value, layout="batch"):
    n, c, h, w = x.shape
    ph, pw = padding
    oh = conv_out_size(h, kernel[0], stride[0], ph, dilation[0])
    ow = conv_out_size(w, kernel[1], stride[1], pw, dilation[1])
    kh, kw = kernel
    ones = layout == "gemm_bias"
    if layout in ("gemm", "gemm_bias"):
        cols = _im2col_native(xp, x, kernel, stride, padding, dilation, pad_value, oh, ow, ones)
        if cols is not None:
            return cols
    if ph or pw:
        xpad = xp.full((n, c, h + 2 * ph, w + 2 * pw), pad_value, dtype=x.dtype)
        xpad[:, :, ph:ph + h, pw:pw + w] = x
    else:
        xpad = x
    # Every window at once as a strided view of the (padded) input, copied in one call:
    # 2.3x faster than kh*kw strided slice copies (rows of ow elements) for a 3x3 conv
    # over (64, 32, 13, 13). The view is only read, and never escapes.
    sn, sc, sh, sw = xpad.strides
    if layout in ("gemm", "gemm_bias"):
        rows = c * kh * kw
        cols = xp.empty((rows + ones, n * oh * ow), dtype=x.dtype)
        if not (xp is np and _unfold_by_row_pitch(xpad, cols, kernel, stride, dilation, oh, ow)):
            windows = xp.lib.stride_tricks.as_strided(
                xpad, (c, kh, kw, n, oh, ow),
                (sc, sh * dilation[0], sw * dilation[1], sn, sh * stride[0], sw * stride[1]))
            cols[:rows].reshape(c, kh, kw, n, oh, ow)[...] = windows
        if ones:
            cols[rows] = 1
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
    """unfold's "gemm" columns by numpy with long copies, for a stride of 1 down the rows
    and windows narrower than the rows; False (the one strided copy runs) otherwise. The
    one copy's innermost run is a window row, OW elements (conv2 of LeNet: 202K copies of
    11 floats, ~0.9 ms of loop overhead). Here, per column offset j, the input's rows are
    first cut to the OW columns that offset reads (kw copies of each H-row of the plane:
    runs of OW too, but kw*N*C*H of them, not C*kh*kw*N*OH), into a scratch whose rows are
    OW long: then a window's OH rows are consecutive there, and each (channel, offset,
    image) column run is one contiguous copy of OH*OW elements. By blocks of channels;
    the scratch is the last channel's column rows (written last, by the one strided
    copy), so a cold first call faults in no pages the columns do not need anyway (a
    scratch of its own cost more than the copies saved). Plain copies: the same values,
    bit for bit (LeNet's conv2 unfold 1.00 -> 0.80 ms warm)."""
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
    adds run) for windows wider than the output rows or columns not C-contiguous. The
    per-offset adds' innermost run is a window row, OW elements (LeNet's conv2 input
    gradient: 9 adds of 64*32*11 rows of 11, ~2.4 ms of loop overhead warm). Here the two
    offsets are summed apart, each where its runs are long:

    - rows first, in a scratch U[ch, j, image] of Hp rows of OW (the columns' own row
      pitch): the window rows i of one (ch, j, image) are its OH*OW column run, added
      whole at row i (kh adds of N*C*kw runs of OH*OW elements);
    - then the column offsets j over the flat (image, row, OW) run of each channel: the
      image column x = ox + j sums U[ch, j] at flat index q - j, so for the columns every
      offset reaches (kw-1 <= x < OW) it is kw-1 adds of whole flat runs, in place in
      U[ch, 0] (the other positions, where q - j crosses a row's start, are not read);
      the 2*(kw-1) edge columns, which fewer offsets reach, are strided adds of their own,
      first (they read U[ch, 0] before it is overwritten);
    - the middle columns go into img with one copy (runs of OW-kw+1).

    By blocks of channels (`_FOLD_BLOCK`) through one scratch. The terms are the same, the
    order of the adds is not (offset i then j, against the per-offset form's (i, j) row
    order, which the col2im kernel does not follow either): equal within float32 rounding.
    Each sum starts from +0.0, as a sum into zeros does (-0.0 terms give +0.0)."""
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


def _fold_count(cols, output_size, kernel, stride, padding, dilation, layout):
    """(N, C) of the image that columns `cols` fold into."""
    if layout == "gemm":
        ckk, nl = cols.shape
        oh = conv_out_size(output_size[0], kernel[0], stride[0], padding[0], dilation[0])
        ow = conv_out_size(output_size[1], kernel[1], stride[1], padding[1], dilation[1])
        return nl // (oh * ow), ckk // (kernel[0] * kernel[1])
    n, ckk, _ = cols.shape
    return n, ckk // (kernel[0] * kernel[1])


def _fold_rule(cols, output_size, kernel, stride, padding, dilation, layout="batch"):
    if layout == "gemm":
        oh = conv_out_size(output_size[0], kernel[0], stride[0], padding[0], dilation[0])
        ow = conv_out_size(output_size[1], kernel[1], stride[1], padding[1], dilation[1])
        kk = kernel[0] * kernel[1]
        if cols.ndim != 2 or oh <= 0 or ow <= 0 or cols.shape[1] % (oh * ow) or cols.shape[0] % kk:
            raise ShapeError(f"fold: columns of shape {cols.shape} in 'gemm' layout should be "
                             f"(C*{kk}, N*{max(oh, 0) * max(ow, 0)}) for output size {output_size}")
    n, c = _fold_count(cols, output_size, kernel, stride, padding, dilation, layout)
    return Aval((n, c) + tuple(output_size), cols.dtype, cols.device)


def _fold_impl(xp, cols, output_size, kernel, stride, padding, dilation, layout="batch"):
    n, c = _fold_count(cols, output_size, kernel, stride, padding, dilation, layout)
    h, w = output_size
    ph, pw = padding
    oh = conv_out_size(h, kernel[0], stride[0], ph, dilation[0])
    ow = conv_out_size(w, kernel[1], stride[1], pw, dilation[1])
    kh, kw = kernel
    if layout == "gemm":
        # By one numba loop where it runs (compiler/cpu/kernels/native.py), writing a C-contiguous image,
        # else by numpy into a channel-major one ((C, N, H, W) memory, the order the column
        # rows come in): for a stride of 1 by `_fold_by_row_pitch`, else by adds of
        # (C, kh, kw, N, OH, OW) read as (N, C, kh, kw, OH, OW), one per offset.
        img = _col2im_native(xp, cols, n, c, output_size, kernel, stride, padding, dilation)
        if img is not None:
            return img
        if xp is np and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1):
            img = np.empty((c, n, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
            if _fold_by_row_pitch(cols, img, kernel, oh, ow):
                return img.transpose(1, 0, 2, 3)[:, :, ph:ph + h, pw:pw + w]
        cols = cols.reshape(c, kh, kw, n, oh, ow).transpose(3, 0, 1, 2, 4, 5)
        out = xp.zeros((c, n, h + 2 * ph, w + 2 * pw), dtype=cols.dtype).transpose(1, 0, 2, 3)
        for i, j, rs, cs in _windows(kernel, stride, dilation, oh, ow):
            out[:, :, rs, cs] += cols[:, :, i, j]
        return out[:, :, ph:ph + h, pw:pw + w]
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


def _col2im_source(dtype, kernel, stride, padding, dilation) -> str:
    """col2im from (C*kh*kw, N*OH*OW) rows into a zeroed C-contiguous (N, C, H, W) image,
    the window offsets unrolled (numpy's 9 strided adds of 11-element rows for LeNet's second
    conv took 5.1 ms, a loop over the offsets with the geometry as arguments as long; this
    1.4 ms). The image is C-contiguous because what follows a convolution's input gradient
    is elementwise (ReLU's gradient, max-pooling's): a channel-major one sent compiled ReLU
    gradients down their strided path and was copied by the pooling kernel. Each plane is
    still written whole before the next (channel by channel, image by image). One source per
    geometry and dtype, never per size."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    lines = ["from numba import njit", "", "",
             f"@njit(\"void(Array({dtype}, 2, 'C', readonly=True), {dtype}[:, :, :, ::1], int64, "
             f"int64, int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True)",
             "def kernel(cols, out, oh, ow, c0, c1):",
             f'    """col2im {kernel} {stride} {padding} {dilation}, channels c0..c1-1"""',
             "    n, c, h, w = out.shape",
             "    for ch in range(c0, c1):",
             "        for b in range(n):",
             "            for oy in range(oh):",
             "                base = (b * oh + oy) * ow"]
    for i in range(kh):
        lines.append(f"                y{i} = oy * {sh} - {ph} + {i * dh}")
    lines.append("                for ox in range(ow):")
    for i in range(kh):
        for j in range(kw):
            col = f"ox * {sw} - {pw} + {j * dw}"
            guard = f"if y{i} >= 0 and y{i} < h and {col} >= 0 and {col} < w: " if ph or pw else ""
            lines.append(f"                    {guard}out[b, ch, y{i}, {col}] += "
                         f"cols[(ch * {kh} + {i}) * {kw} + {j}, base + ox]")
    return "\n".join(lines) + "\n"


_MAX_UNROLL = 64   # window positions up to which col2im gets an unrolled kernel


def _im2col_source(dtype, kernel, stride, padding, dilation) -> str:
    """im2col into (C*kh*kw, N*OH*OW) rows from a C-contiguous (N, C, H, W) image, one
    output row after the other (each written once, in order; the image's channel plane it
    reads stays in cache for the kh*kw rows that use it). numpy's one copy of a 6-D
    strided view, whose innermost run is OW elements (11 for LeNet's second conv), wrote
    its 8.9 MB of columns at ~4 GB/s. One source per geometry and dtype. The window's
    offsets are loops over the kernel's extent passed as arguments (kh, kw: the geometry's,
    written into the row index still): with constant trip counts LLVM unrolled them, nine
    copies of the copy loop for a 3 x 3 kernel, and the module compiled in 0.33 s of CPU
    instead of 0.16 s, for no speed (the copy loop is the work; same times either way)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    pad = bool(ph or pw)
    lines = ["import numpy as np",
             "from numba import njit", "", "",
             f"@njit(\"void(Array({dtype}, 4, 'C', readonly=True), {dtype}[:, ::1], int64, int64, "
             f"float64, int64, int64, int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, "
             "nogil=True)",
             "def kernel(x, cols, oh, ow, pad_value, c0, c1, kh, kw):",
             f'    """im2col {kernel} {stride} {padding} {dilation}, channels c0..c1-1 (kh, kw: {kh}, {kw})"""',
             "    n, c, h, w = x.shape",
             f"    fill = np.{dtype}(pad_value)",
             "    for ch in range(c0, c1):",
             "        for i in range(kh):",
             "            for j in range(kw):",
             f"                row = cols[(ch * {kh} + i) * {kw} + j]",
             "                for b in range(n):",
             "                    for oy in range(oh):",
             "                        base = (b * oh + oy) * ow",
             f"                        y = oy * {sh} - {ph} + i * {dh}"]
    if pad:
        lines += ["                        if y < 0 or y >= h:",
                  "                            for ox in range(ow):",
                  "                                row[base + ox] = fill",
                  "                            continue"]
    lines += ["                        src = x[b, ch, y]",
              "                        for ox in range(ow):",
              f"                            xx = ox * {sw} - {pw} + j * {dw}"]
    if pad:
        lines.append("                            row[base + ox] = src[xx] if xx >= 0 and xx < w else fill")
    else:
        lines.append("                            row[base + ox] = src[xx]")
    return "\n".join(lines) + "\n"


# im2col and col2im do a range of input channels (a channel's rows and image planes are its
# own), so a call is shared over the cores the machine gives (tracejit/compiler/cpu/runtime/sharepool.py; the
# kernels are nogil). A column element costs about what this many multiply-adds of a BLAS
# product do (sharepool.split's unit): LeNet's second conv, 2.2M column elements (~1 ms
# each way on one thread), splits; its first (one input channel) cannot.
_COLUMN_WORK = 8


def _im2col_native(xp, x, kernel, stride, padding, dilation, pad_value, oh, ow, ones=False):
    """unfold in "gemm" layout (with `ones`: "gemm_bias") by a numba kernel, or None (numpy
    does it). The kernel writes the "gemm" rows; the ones row is one fill."""
    import numpy as np
    from ..compiler.cpu.kernels.native import kernel as native_kernel, takes
    if not takes(xp, x):
        return None
    dt = x.dtype.name
    key = ("im2col", dt) + tuple(kernel) + tuple(stride) + tuple(padding) + tuple(dilation)
    fn = native_kernel(key, lambda: _im2col_source(dt, kernel, stride, padding, dilation),
                       steady=True).get()
    if fn is None:
        return None
    n, c = x.shape[:2]
    rows = c * kernel[0] * kernel[1]
    cols = np.empty((rows + ones, n * oh * ow), dtype=x.dtype)
    xc = np.ascontiguousarray(x)
    kh, kw = kernel
    _sharepool.split(lambda c0, c1: fn(xc, cols, oh, ow, float(pad_value), c0, c1, kh, kw), c,
                     _COLUMN_WORK * cols.size)
    if ones:
        cols[rows] = 1
    return cols


def _col2im_native(xp, cols, n, c, output_size, kernel, stride, padding, dilation):
    """fold in "gemm" layout by a numba kernel, or None (numpy does it)."""
    import numpy as np
    from ..compiler.cpu.kernels.native import kernel as native_kernel, takes
    if not takes(xp, cols) or kernel[0] * kernel[1] > _MAX_UNROLL:
        return None
    dt = cols.dtype.name
    key = ("col2im", dt) + tuple(kernel) + tuple(stride) + tuple(padding) + tuple(dilation)
    fn = native_kernel(key, lambda: _col2im_source(dt, kernel, stride, padding, dilation),
                       steady=True).get()
    if fn is None:
        return None
    h, w = output_size
    oh = conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    img = np.zeros((n, c, h, w), dtype=cols.dtype)
    cc = np.ascontiguousarray(cols)
    _sharepool.split(lambda c0, c1: fn(cc, img, oh, ow, c0, c1), c, _COLUMN_WORK * cols.size)
    return img


def _unfold_vjp(g, out, x, kernel, stride, padding, dilation, pad_value, layout="batch"):
    if layout == "gemm_bias":   # the ones row's gradient is dropped
        from .shape import narrow
        g = narrow(g, 0, 0, g.shape[0] - 1)
        layout = "gemm"
    return (fold(g, tuple(x.shape[2:]), kernel, stride, padding, dilation, layout),)


UNFOLD = defprim("unfold", _unfold_impl, _unfold_rule, _unfold_vjp, kind="other",
                 save=lambda rq: (), extra={"meta": (0,)})
FOLD = defprim("fold", _fold_impl, _fold_rule,
               lambda g, out, cols, output_size, kernel, stride, padding, dilation, layout="batch": (
                   unfold(g, kernel, stride, padding, dilation, layout=layout),),
               kind="other", save=lambda rq: ())


def _pair(v):
    return (int(v), int(v)) if isinstance(v, int) else tuple(int(x) for x in v)


_LAYOUTS = ("batch", "gemm")


def unfold(x, kernel_size, stride=1, padding=0, dilation=1, pad_value=0.0, layout: str = "batch"):
    """im2col: (N, C*kh*kw, L) columns, or (C*kh*kw, N*L) with ``layout="gemm"``, or those
    and a last row of ones with ``layout="gemm_bias"``."""
    if layout not in _LAYOUTS + ("gemm_bias",):
        raise ValueError(f"unfold: layout must be one of {_LAYOUTS}, got {layout!r}")
    params = dict(kernel=_pair(kernel_size), stride=_pair(stride), padding=_pair(padding),
                  dilation=_pair(dilation), pad_value=float(pad_value))
    if layout != "batch":   # the default stays out of the params (and of existing IR text)
        params["layout"] = layout
    return bind(UNFOLD, x, **params)


def fold(cols, output_size, kernel_size, stride=1, padding=0, dilation=1, layout: str = "batch"):
    """col2im, summing overlaps: columns in `unfold`'s `layout` back to (N, C, H, W)."""
    if layout not in _LAYOUTS:
        raise ValueError(f"fold: layout must be one of {_LAYOUTS}, got {layout!r}")
    params = dict(output_size=_pair(output_size), kernel=_pair(kernel_size), stride=_pair(stride),
                  padding=_pair(padding), dilation=_pair(dilation))
    if layout != "batch":
        params["layout"] = layout
    return bind(FOLD, cols, **params)
