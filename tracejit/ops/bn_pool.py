"""Training-mode batch norm and the max pooling after it as one record: one pass writes the pooled maxima.

``batch_norm_max_pool2d(x, weight, bias, eps, kernel, stride, padding, dilation)`` -> flat
record: max_pool2d_with_offsets' record (2, N, C, OH, OW) of the normalized x (C-contiguous),
then the (2, C) statistics. It is exactly

    r = batch_norm_forward(x, weight, bias, eps)   # normalized output, then statistics
    y = r[:x.size] in x's shape
    max_pool2d_with_offsets(y) then r's statistics

(ops/batchnorm_prim.py, ops/pool_offsets.py), and that composition is its numpy form. Not
differentiable (no VJP), as the two records it replaces: the compiled forward plan takes it
(jit/bn_pool_fusion.py) after differentiation, when the normalized output y is read only by
the pooling's record (the BatchNorm gradient reads x and the statistics, the pooling
gradient the record's offsets), so y is never written.

Why (profile of LeNet's compiled step, one thread): between the conv GEMM and the next conv
the forward made two passes over each conv activation, BatchNorm's (read x, write y) and the
pooling's (read y): (64, 32, 26, 26) float32 is 5.5 MB, more than a core's L2. The kernel does
per channel what batch_norm_forward's does (the same sums, statistics and ``a*x + d`` per
element, in the same dtypes and order, so bitwise its values), then pools each normalized
window from the channel's run of x while it is in cache, with pool_kernels' window code (the
same first-maximum and NaN rules): y is never stored.
"""
from __future__ import annotations

import numpy as np

from ..compiler.cpu.runtime import sharepool as _sharepool
from ..shapes import numel
from . import batchnorm_prim as _bn
from ..compiler.cpu.kernels import pool_kernels as _pk
from . import pool_offsets as _po
from ..compiler.cpu.kernels.native import kernel as _kernel, standing_in as _standing_in, takes as _takes
from .registry import Aval, bind, defprim

__all__ = ["batch_norm_max_pool2d", "batch_norm_backward_pooled", "record_parts"]


def _source(dtype, kernel, stride, padding, dilation) -> str:
    """The fused kernel for one dtype and window geometry. Per channel: batch_norm_forward's
    sums and statistics (its kernel's lines); then per (n, c) plane its ``a*x + d`` into a
    plane of scratch (a few KB: in L1), pooled from there by `pool_plane` (pool_kernels'
    window lines, compiled without the sums' reassociation, as max_pool2d_with_offsets'
    kernel is). x is read through its flat buffer and (N, C) strides, any order; the record
    is (2, N, C, OH, OW), C-contiguous. An earlier form normalized inside the window loop
    (4-D indexing of x, under the sums' fastmath): LeNet's two took 1.74 ms a step against
    1.82 unfused; this one 1.42-1.64."""
    head = _bn._HEAD.replace("{t}", dtype).replace("BLOCK", str(_bn.BLOCK))
    ro = f"Array({dtype}, 1, 'C', readonly=True)"
    pool = [
        # (no CPython wrapper: only the kernel calls it; from Python it would crash)
        f'@njit("void({dtype}[:, ::1], {dtype}[:, :, :, :, ::1], int64, int64)", '
        "error_model='numpy', boundscheck=False, nogil=True, no_cpython_wrapper=True)",
        "def pool_plane(s, rec, i, ch):",
        '    """rec[:, i, ch] = the windows\' maxima of the plane s and their first offsets"""',
        "    h, w = s.shape[0], s.shape[1]",
        "    oh, ow = rec.shape[3], rec.shape[4]",
        f"    low = np.{dtype}(-np.inf)",
        f"    nanv = np.{dtype}(np.nan)",
        "    for oy in range(oh):",
    ]
    win: list = []
    _pk._window_loads(win, kernel, stride, padding, dilation, argmax=dtype)
    if _pk.tiles(kernel, stride, padding, dilation) and tuple(kernel) == (2, 2):
        # 2x2 windows side by side: the window's rows as slices of the plane's rows and the
        # record's rows as slices (unit strides LLVM sees: the loop vectorizes; indexed
        # through the 2-D arrays it ran scalar, ~12 cycles a window); the same loads
        # v0..v3 and the same selects after them
        pool += ["        top = s[2 * oy]", "        bot = s[2 * oy + 1]",
                 "        o0 = rec[0, i, ch, oy]", "        o1 = rec[1, i, ch, oy]",
                 "        for ox in range(ow):",
                 "            v0 = top[2 * ox]", "            v1 = top[2 * ox + 1]",
                 "            v2 = bot[2 * ox]", "            v3 = bot[2 * ox + 1]"]
        win = win[win.index("                m = v0"):]
        pool += [line[4:] for line in win]
        pool += ["            o0[ox] = nanv if nan else m", "            o1[ox] = a"]
    else:
        for line in win:
            for k in range(kernel[0] * kernel[1]):
                line = line.replace(f"x[b, p, y{k}, x{k}]", f"s[y{k}, x{k}]")
            pool.append(line[4:])
        pool += ["            rec[0, i, ch, oy, ox] = nanv if nan else m",
                 "            rec[1, i, ch, oy, ox] = a"]
    main = [
        f'@njit("void({ro}, int64, int64, int64, int64, int64, int64, int64, float64[::1], '
        f'float64[::1], float64, {dtype}[:, :, :, :, ::1], {dtype}[:, ::1], int64, int64)", '
        "cache=CACHE, error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)",
        "def kernel(x, sn, sc, n, c, l, h, w, weight, bias, eps, rec, stats, c0, c1):",
        '    """per channel: batch_norm_forward\'s statistics, then each plane normalized and',
        '    pooled (`pool_plane`); channels c0..c1-1"""',
        f"    plane = np.empty(l, np.{dtype})",
        "    sp = plane.reshape(h, w)",
        "    count = n * l",
        "    for ch in range(c0, c1):",
        "        shift = x[ch * sc]",
        "        s1, s2 = moments(x, sn, sc, n, l, ch, shift)",
        "        m = s1 / count",
        f"        mean = np.{dtype}(shift + m)",
        f"        var = np.{dtype}(max(s2 / count - m * m, 0.0))",
        "        stats[0, ch] = mean",
        "        stats[1, ch] = var",
        "        a = weight[ch] / np.sqrt(np.float64(var) + eps)",
        "        dd = bias[ch] - np.float64(mean) * a",
        f"        ac = np.{dtype}(a)",
        f"        dc = np.{dtype}(dd)",
        "        for i in range(n):",
        "            xrow = x[i * sn + ch * sc:i * sn + ch * sc + l]",
        "            for k in range(l):",
        "                plane[k] = ac * xrow[k] + dc",
        "            pool_plane(sp, rec, i, ch)",
    ]
    return head + "\n" + "\n".join(pool) + "\n\n\n" + "\n".join(main) + "\n"


def _holder(dtype, kernel, stride, padding, dilation):
    """The fused kernel's `native.NativeKernel`, or None where it has none."""
    if dtype not in ("float32", "float64") or kernel[0] * kernel[1] > _pk.MAX_WINDOW:
        return None
    key = ("bn_maxpool", dtype) + tuple(v for pair in (kernel, stride, padding, dilation)
                                        for v in pair)
    return _kernel(key, lambda: _source(dtype, kernel, stride, padding, dilation), steady=True)


def _get(dtype, kernel, stride, padding, dilation):
    k = _holder(dtype, kernel, stride, padding, dilation)
    return None if k is None else k.get()


def _rule(x, weight, bias, eps, kernel, stride, padding, dilation):
    _bn._forward_rule(x, weight, bias, eps)
    rec = _po._record_rule(x, kernel, stride, padding, dilation)
    return Aval((numel(rec.shape) + 2 * x.shape[1],), x.dtype, x.device)


def _impl(xp, x, weight, bias, eps, kernel, stride, padding, dilation):
    n, c = x.shape[0], x.shape[1]
    k = None
    if _takes(xp, x) and x.size and x.ndim == 4:
        k = _holder(x.dtype.name, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))
        fn = None if k is None else k.get()
        if fn is not None:
            oh, ow = _pk._pooled_hw(x, kernel, stride, padding, dilation)
            psize = 2 * n * c * oh * ow
            out = np.empty(psize + 2 * c, x.dtype)
            l = x.size // (n * c)
            args = (*_bn._flat(x), n, c, l, x.shape[2], x.shape[3],
                    np.ascontiguousarray(_bn._channels(weight, xp, c)),
                    np.ascontiguousarray(_bn._channels(bias, xp, c)), float(eps),
                    out[:psize].reshape(2, n, c, oh, ow), out[psize:].reshape(2, c))
            _sharepool.split(lambda c0, c1: fn(*args, c0, c1), c, _bn._ELEMENT_WORK * x.size)
            return out
    # the composition this op stands for (while `k` compiles, its kernels' asks serve
    # only until `k` is in: native.standing_in)
    with _standing_in(k):
        r = _bn._forward_impl(xp, x, weight, bias, eps)
        y = r[:x.size].reshape(x.shape)
        rec = _po._record_impl(xp, y, kernel, stride, padding, dilation)
    return xp.concatenate([xp.ascontiguousarray(rec).reshape(-1), r[x.size:]])


BATCH_NORM_MAX_POOL2D = defprim("batch_norm_max_pool2d", _impl, _rule, None, kind="other")


def batch_norm_max_pool2d(x, weight, bias, eps: float, kernel, stride, padding=(0, 0),
                          dilation=(1, 1)):
    """The flat record: max_pool2d_with_offsets' record of batch_norm's training-mode output,
    then the (2, C) statistics (see the module docstring); not differentiable."""
    return bind(BATCH_NORM_MAX_POOL2D, x, weight, bias, eps=float(eps), kernel=tuple(kernel),
                stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))


def record_parts(rec, x_shape, kernel, stride, padding, dilation):
    """(pool record (2, N, C, OH, OW), statistics (2, C)) of the flat record, as views."""
    n, c = x_shape[0], x_shape[1]
    oh = (x_shape[2] + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (x_shape[3] + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    psize = 2 * n * c * oh * ow
    return rec[:psize].reshape(2, n, c, oh, ow), rec[psize:].reshape(2, c)


# ---------------------------------------------------------------- the backward
# batch_norm_backward_pooled(gp, rec, x, stats, weight, eps, geometry) -> batch_norm_backward's
# record of the gradient max_pool2d_scatter(gp, rec) for windows side by side (kernel ==
# stride, no padding or dilation: each input position in at most one window). Per channel
# the kernel writes the scattered gradient straight into the channel's block of the output
# (channel-major, as batch_norm_backward's), sums it as that kernel does (the same blocks in
# the same order: bitwise the same sums), then turns the block in place into the input
# gradient: the pooling's gradient (x's size: LeNet's first, 5.5 MB) is never stored and
# read back. The numpy form is the composition.
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
    """The fused backward kernel's `native.NativeKernel`, or None where it has none."""
    if dtype not in ("float32", "float64"):
        return None
    src = (_bn._HEAD + _BACKWARD_SRC).replace('" + RO + "', f"Array({dtype}, 1, 'C', readonly=True)")
    src = src.replace("{t}", dtype).replace("BLOCK", str(_bn.BLOCK))
    src = src.replace("KH", str(kernel[0])).replace("KW", str(kernel[1]))
    return _kernel(("bn_maxpool_backward", dtype, kernel[0], kernel[1]), lambda: src, steady=True)


def _get_backward(dtype, kernel):
    k = _backward_holder(dtype, kernel)
    return None if k is None else k.get()


def _backward_rule(gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    _po._scatter_rule(gp, rec, tuple(x.shape), kernel, stride, padding, dilation)
    return _bn._backward_rule(x, x, stats, weight, eps)


def _backward_impl(xp, gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    k = None
    if (_takes(xp, gp, rec, x) and x.size and x.ndim == 4 and gp.dtype == x.dtype == rec.dtype
            and _pk.tiles(kernel, stride, padding, dilation)):
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
                    *_bn._flat(x), n, c, h * w, w, oh, ow, mean, rstd,
                    np.ascontiguousarray(_bn._channels(weight, xp, c)), out)
            _sharepool.split(lambda c0, c1: fn(*args, c0, c1), c, _bn._ELEMENT_WORK * x.size)
            return out
    # the composition this op stands for (see `_impl`)
    with _standing_in(k):
        g = _po._scatter_impl(xp, gp, rec, tuple(x.shape), kernel, stride, padding, dilation)
        return _bn._backward_impl(xp, g, x, stats, weight, eps)


BN_BACKWARD_POOLED = defprim("batch_norm_backward_pooled", _backward_impl, _backward_rule, None,
                             kind="other")


def batch_norm_backward_pooled(gp, rec, x, stats, weight, eps: float, kernel, stride,
                               padding=(0, 0), dilation=(1, 1)):
    """batch_norm_backward's record (input gradient channel-major, then the two sums) for the
    gradient ``max_pool2d_scatter(gp, rec, x.shape)``; not differentiable (a compiled
    backward plan's op, jit/bn_pool_fusion.py)."""
    return bind(BN_BACKWARD_POOLED, gp, rec, x, stats, weight, eps=float(eps), kernel=tuple(kernel),
                stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
