"""A direct convolution for few output channels: a generated numba loop nest that reads
the (padded) input in place, no im2col columns and no GEMM.

With few output channels the im2col + GEMM form is bound by BLAS's packing of the columns,
each column element packed once for only O multiply-adds (8 channels: about 30 GFLOP/s
against 60 at 64 channels on one core). Here, per image and output row, a tile of `_TILE`
output channels is summed over input channels into a (tile, OW) buffer that stays in L1;
for each input channel the kh*kw window rows are read once and each output element takes
the tile's kh*kw terms in one pass of the vectorized loop over output columns (the
weights of the channel are scalars hoisted out of it). Unit column stride only, so each
window row is a contiguous run of the input.
"""
from __future__ import annotations

import numpy as np

from .loader import kernel as native_kernel

__all__ = ["direct_fits", "direct_forward", "direct_call"]

# Output channels summed together per pass over an input channel's rows at most: the loop
# body holds the window's kh*kw values and one channel's sum at a time; a tile of 16 made
# it too big to vectorize (4-6x slower).
_TILE = 8


def _source(dtype: str, kernel, row_stride: int, dilation, t: int) -> str:
    (kh, kw), sh, (dh, dw) = kernel, row_stride, dilation
    lines = ["import numpy as np",
             "from numba import njit", "", "",
             f"@njit(\"void(Array({dtype}, 4, 'C', readonly=True), Array({dtype}, 4, 'C', readonly=True), "
             f"{dtype}[:, :, :, ::1], int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, "
             "nogil=True, fastmath={'contract'})",
             "def kernel(xp, w, out, b0, b1):",
             f'    """direct convolution {kernel} row stride {sh} dilation {dilation}, images b0..b1-1 of the '
             f'padded input, {t} output channels a pass"""',
             "    n, c, hp, wp = xp.shape",
             "    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]",
             f"    acc = np.empty(({t}, ow), out.dtype)",
             f"    zero = np.{dtype}(0)",
             "    for b in range(b0, b1):",
             "        for y in range(oh):",
             f"            for t0 in range(0, w.shape[0], {t}):",
             f"                for q in range({t}):",
             "                    for x in range(ow):",
             "                        acc[q, x] = zero"]
    lines += [f"                a{q} = acc[{q}]" for q in range(t)]
    lines += ["                for ch in range(c):"]
    lines += [f"                    r{i} = xp[b, ch, y * {sh} + {i * dh}]" for i in range(kh)]
    lines += [f"                    w{q}_{i}_{j} = w[t0 + {q}, ch, {i}, {j}]"
              for q in range(t) for i in range(kh) for j in range(kw)]
    lines += ["                    for x in range(ow):"]
    lines += [f"                        s{i}_{j} = r{i}[x + {j * dw}]" for i in range(kh) for j in range(kw)]
    for q in range(t):
        lines.append(f"                        v = a{q}[x]")
        lines += [f"                        v += w{q}_{i}_{j} * s{i}_{j}" for i in range(kh) for j in range(kw)]
        lines.append(f"                        a{q}[x] = v")
    lines += [f"                for q in range(min({t}, o - t0)):",
              "                    dst = out[b, t0 + q, y]",
              "                    src = acc[q]",
              "                    for x in range(ow):",
              "                        dst[x] = src[x]"]
    return "\n".join(lines) + "\n"


def _kernel(dt: str, kernel, row_stride: int, dilation, tile: int):
    key = ("conv_direct", dt) + tuple(kernel) + (row_stride,) + tuple(dilation) + (tile,)
    return native_kernel(key, lambda: _source(dt, kernel, row_stride, dilation, tile), steady=True)


# Output channels up to which the direct form runs (one thread, 3x3 windows over 64x64
# images: 8 channels 1.1-1.7x faster than im2col + GEMM; 16 channels 0.6-0.9x, 32 0.55x;
# a tile of 16 channels did not vectorize).
DIRECT_MAX_O = 8
# Output columns from which it runs: each input channel's weights are loaded once a row and
# the vectorized loop runs over the row's columns (8 channels: 0.4-0.55x at 8 columns,
# 0.85-1.0x at 16, 1.0-1.2x at 32, 1.1-1.7x at 64).
DIRECT_MIN_OW = 64


def direct_fits(o: int, stride: tuple, ow: int) -> bool:
    """Whether a convolution with `o` output channels, `stride` and output rows `ow` long
    takes the direct form: few output channels, unit column stride, rows long enough to
    fill the vector loop."""
    return o <= DIRECT_MAX_O and stride[1] == 1 and ow >= DIRECT_MIN_OW


def direct_call(x_shape: tuple, w_shape: tuple, dtype, kernel: tuple, stride: tuple, padding: tuple,
                dilation: tuple, oh: int, ow: int, blocks):
    """``call(x, w, bias=None)``: the (N, O, oh, ow) convolution of an x of `x_shape` (N, C,
    H, W) by a w of `w_shape` (O, C, kh, kw, any strides) by the direct kernel, or None while
    it is not loaded; what the signature fixes worked out once, here. ``blocks(fn, n,
    per_image, work)`` runs ``fn(s, e, nb)`` over image blocks (conv_blocks' splitter)."""
    n, c, h, wd = x_shape
    o, dtype = w_shape[0], np.dtype(dtype)
    tile = min(o, _TILE)
    kern = _kernel(dtype.name, kernel, stride[0], dilation, tile)
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    # the padded extent the windows of oh x ow outputs read (more or less than the image)
    hp, wp = (oh - 1) * stride[0] + dh * (kh - 1) + 1, ow + dw * (kw - 1)
    tiles = -(-o // tile) * tile
    rh, rw = max(0, min(h, hp - ph)), max(0, min(wd, wp - pw))   # image rows, columns read
    in_place = ph == pw == 0     # a C-contiguous x is read where it is (the kernel reads hp x wp of it)
    per_image, work = c * hp * wp * dtype.itemsize, o * c * kh * kw * oh * ow * n
    out_shape, bias_shape = (n, o, oh, ow), (o, 1, 1)

    def call(x, w, bias=None):
        fn = kern.fn or kern.get()
        if fn is None:
            return None
        if tiles == o:
            wt = np.ascontiguousarray(w)
        else:
            wt = np.zeros((tiles, c, kh, kw), dtype)
            wt[:o] = w
        out = np.empty(out_shape, dtype)
        direct = in_place and x.flags.c_contiguous

        def block(s: int, e: int, nb: int) -> None:
            if direct:
                xp = x[s:e]
            else:
                xp = np.zeros((e - s, c, hp, wp), dtype)
                xp[:, :, ph:ph + rh, pw:pw + rw] = x[s:e, :, :rh, :rw]
            fn(xp, wt, out[s:e], 0, e - s)
            if bias is not None:
                out[s:e] += bias.reshape(bias_shape)
        if n == 1:
            block(0, 1, 1)
        else:
            blocks(block, n, per_image, work)
        return out
    return call


def direct_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, kernel: tuple, stride: tuple,
                   padding: tuple, dilation: tuple, oh: int, ow: int, blocks) -> np.ndarray | None:
    """(N, O, oh, ow) convolution of x (N, C, H, W) by w (O, C, kh, kw) by the direct
    kernel, or None while it is not loaded (`direct_call` for this one call)."""
    return direct_call(x.shape, w.shape, x.dtype, kernel, stride, padding, dilation, oh, ow, blocks)(x, w, bias)
