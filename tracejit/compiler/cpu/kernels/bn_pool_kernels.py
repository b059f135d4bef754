"""BatchNorm's backward of a max pooling's scattered gradient as one numba pass: the CPU
backend's implementation of ops/bn_pool.py's record (its rule and numpy form live there).

Per channel the kernel writes the scattered gradient straight into the channel's block of
the output, then runs batch_norm_backward's channel (its sums, then the input gradient in
place): the x-sized scattered gradient is never stored and read back. While the kernel is
not loaded, the composition runs, each part as the CPU runs it.
"""
from __future__ import annotations

import numpy as np

from ....ops import batchnorm_prim as _bn
from ....ops import pool_offsets as _po
from ..runtime import sharepool as _sharepool
from . import batchnorm_kernels as _bnk
from .loader import kernel as _kernel, standing_in as _standing_in, takes as _takes

__all__ = ["batch_norm_backward_pooled"]


def _tiles(kernel, stride, padding, dilation) -> bool:
    """Do the windows sit side by side without padding (each input in at most one)?"""
    return tuple(stride) == tuple(kernel) and tuple(dilation) == (1, 1) and tuple(padding) == (0, 0)


# ---------------------------------------------------------------- the backward
_BACKWARD_SRC = '''
@njit("void(" + RO + ", " + RO + ", " + RO + ", int64, int64, int64, int64, int64, int64, int64, int64, "
      "float64[::1], float64[::1], float64[::1], {t}[::1], int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(gp, off, x, sn, sc, n, c, l, w, oh, ow, mean, rstd, weight, out, c0, c1):
    """gp, off: the pooled gradient and the record's offsets as flat C-contiguous (N, C, OH,
    OW); per channel ch: batch_norm_backward's kernel on g = the scattered gp"""
    count = n * l
    zero = np.{t}(0)
    for ch in range(c0, c1):
        for i in range(n):
            plane = out[ch * count + i * l:ch * count + (i + 1) * l]
            # positions past the last window: zero (scatter's); every other one is written
            for k in range(oh * KH * w, l):
                plane[k] = zero
            pb = (i * c + ch) * oh * ow
            for oy in range(oh):
                grow = gp[pb + oy * ow:pb + (oy + 1) * ow]
                orow = off[pb + oy * ow:pb + (oy + 1) * ow]
                for r in range(KH):
                    row = plane[(oy * KH + r) * w:(oy * KH + r + 1) * w]
                    for k in range(ow * KW, w):
                        row[k] = zero
                    # g at the recorded offset, zero elsewhere: selects, no data-dependent
                    # index (the loop vectorizes)
                    for ox in range(ow):
                        gv = grow[ox]
                        o = orow[ox]
                        for j in range(KW):
                            row[ox * KW + j] = gv if o == np.{t}(r * KW + j) else zero
        # batch_norm_backward's channel on the block just written (it is g: the same sums,
        # then the input gradient in place)
        channel_grad(out, l, count, x, sn, sc, n, c, l, ch, mean, rstd, weight, out)
'''


def _backward_holder(dtype, kernel):
    """The fused backward kernel's `loader.NativeKernel`, or None where it has none."""
    if dtype not in ("float32", "float64"):
        return None
    src = (_bnk._HEAD + _BACKWARD_SRC).replace('" + RO + "', f"Array({dtype}, 1, 'C', readonly=True)")
    src = src.replace("{t}", dtype).replace("BLOCK", str(_bnk.BLOCK))
    src = src.replace("KH", str(kernel[0])).replace("KW", str(kernel[1]))
    return _kernel(("bn_maxpool_backward", dtype, kernel[0], kernel[1]), lambda: src, steady=True)


def _get_backward(dtype, kernel):
    k = _backward_holder(dtype, kernel)
    return None if k is None else k.get()


def batch_norm_backward_pooled(gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    k = None
    if (_takes(np, gp, rec, x) and x.size and x.ndim == 4 and gp.dtype == x.dtype == rec.dtype
            and _tiles(kernel, stride, padding, dilation)):
        k = _backward_holder(x.dtype.name, tuple(kernel))
        fn = None if k is None else k.get()
        if fn is not None:
            n, c, h, w = x.shape
            oh, ow = gp.shape[2], gp.shape[3]
            count = n * h * w
            mean = np.ascontiguousarray(stats[0], np.float64)
            rstd = 1.0 / np.sqrt(stats[1].astype(np.float64) + eps)
            out = np.empty(c * count + 2 * c, x.dtype)
            args = (np.ascontiguousarray(gp).reshape(-1), np.ascontiguousarray(rec[1]).reshape(-1),
                    *_bnk._flat(x), n, c, h * w, w, oh, ow, mean, rstd,
                    np.ascontiguousarray(_bn._channels(weight, np, c)), out)
            _sharepool.split(lambda c0, c1: fn(*args, c0, c1), c, _bnk._ELEMENT_WORK * x.size)
            return out
    # the composition this op stands for (see `batch_norm_max_pool2d`)
    with _standing_in(k):
        g = _po.MAX_POOL2D_SCATTER.run(np, gp, rec, input_shape=tuple(x.shape), kernel=kernel,
                                       stride=stride, padding=padding, dilation=dilation)
        return _bn.BN_BACKWARD.run(np, g, x, stats, weight, eps=eps)
