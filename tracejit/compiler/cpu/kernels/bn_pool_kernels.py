"""Training-mode BatchNorm and the max pooling after it as one numba pass: the CPU backend's
implementations of ops/bn_pool.py's records (batch_norm_max_pool2d and its backward; the
records, their rules and numpy forms live there).

The forward does per channel what batch_norm_forward's kernel does (the same sums,
statistics and ``a*x + d`` per element, in the same dtypes and order, so bitwise its
values), then pools each normalized window from the channel's run of x while it is in
cache, with the pooling kernel's window code (the same first-maximum and NaN rules): the
normalized activation is never stored. While the fused kernel is not loaded, the
composition runs, each part as the CPU runs it.
"""
from __future__ import annotations

import numpy as np

from ....ops import batchnorm_prim as _bn
from ....ops import pool_offsets as _po
from ....ops.pooling_prim import _out_hw
from ..runtime import sharepool as _sharepool
from . import batchnorm_kernels as _bnk
from .loader import kernel as _kernel, standing_in as _standing_in, takes as _takes

__all__ = ["batch_norm_max_pool2d", "batch_norm_backward_pooled"]

MAX_WINDOW = 64   # positions per window up to which a kernel is generated


def _tiles(kernel, stride, padding, dilation) -> bool:
    """Do the windows sit side by side without padding (each input in at most one)?"""
    return tuple(stride) == tuple(kernel) and tuple(dilation) == (1, 1) and tuple(padding) == (0, 0)


def _window_loads(lines, kernel, stride, padding, dilation, argmax: str = ""):
    """Source lines loading the window of output (oy, ox) as v0..v{kh*kw-1} (padding:
    -inf), with positions y<k>, x<k> and, under padding, in<k> (inside the input); the
    maximum ignoring NaN as m, NaN-ness as nan, and with `argmax` the offset of the first
    maximum as a (of the first NaN when nan) when `argmax` names the dtype to hold it."""
    cast = f"np.{argmax}"
    zero = f"{cast}(0)"
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    add = lines.append
    add(f"            ry = oy * {sh} - {ph}")
    add("            for ox in range(ow):")
    add(f"                rx = ox * {sw} - {pw}")
    count = 0
    for i in range(kh):
        for j in range(kw):
            k = count
            add(f"                y{k} = ry + {i * dh}")
            add(f"                x{k} = rx + {j * dw}")
            if ph or pw:
                add(f"                in{k} = (y{k} >= 0) & (y{k} < h) & (x{k} >= 0) & (x{k} < w)")
                add(f"                v{k} = x[b, p, y{k}, x{k}] if in{k} else low")
            else:
                add(f"                v{k} = x[b, p, y{k}, x{k}]")
            count += 1
    # The maximum ignoring NaN, and whether the window holds one; selects, not branches.
    add("                m = v0")
    if not argmax:
        for k in range(1, count):
            add(f"                m = v{k} if v{k} > m else m")
        add("                nan = " + " | ".join(f"(v{k} != v{k})" for k in range(count)))
        return count
    # The offset `a` (in the data's dtype: an integer here made the selects branches) of
    # the first maximum, strictly greater keeping the first of equal maxima; q the first
    # NaN's (count when none), chosen from the last down. No branch: an `if nan:` around
    # the NaN search made the whole loop branchy (4 ms against 1 for LeNet's first pool).
    add(f"                a = {zero}")
    for k in range(1, count):
        add(f"                c = v{k} > m")
        add(f"                m = v{k} if c else m")
        add(f"                a = {cast}({k}) if c else a")
    add(f"                q = {cast}({count})")
    for k in range(count - 1, -1, -1):
        add(f"                q = {cast}({k}) if v{k} != v{k} else q")
    add(f"                nan = q < {cast}({count})")
    add("                a = q if nan else a")
    return count


def _source(dtype, kernel, stride, padding, dilation) -> str:
    """The fused kernel for one dtype and window geometry. Per channel: batch_norm_forward's
    sums and statistics (its kernel's lines); then per (n, c) plane its ``a*x + d`` into a
    plane of scratch (a few KB: in L1), pooled from there by `pool_plane` (the window lines
    of `_window_loads`, compiled without the sums' reassociation, as max_pool2d_with_offsets'
    kernel is). x is read through its flat buffer and (N, C) strides, any order; the record
    is (2, N, C, OH, OW), C-contiguous. An earlier form normalized inside the window loop
    (4-D indexing of x, under the sums' fastmath): LeNet's two took 1.74 ms a step against
    1.82 unfused; this one 1.42-1.64."""
    head = _bnk._HEAD.replace("{t}", dtype).replace("BLOCK", str(_bnk.BLOCK))
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
    _window_loads(win, kernel, stride, padding, dilation, argmax=dtype)
    if _tiles(kernel, stride, padding, dilation) and tuple(kernel) == (2, 2):
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
    """The fused kernel's `loader.NativeKernel`, or None where it has none."""
    if dtype not in ("float32", "float64") or kernel[0] * kernel[1] > MAX_WINDOW:
        return None
    key = ("bn_maxpool", dtype) + tuple(v for pair in (kernel, stride, padding, dilation)
                                        for v in pair)
    return _kernel(key, lambda: _source(dtype, kernel, stride, padding, dilation), steady=True)


def _get(dtype, kernel, stride, padding, dilation):
    k = _holder(dtype, kernel, stride, padding, dilation)
    return None if k is None else k.get()


def batch_norm_max_pool2d(x, weight, bias, eps, kernel, stride, padding, dilation):
    n, c = x.shape[0], x.shape[1]
    k = None
    if _takes(np, x) and x.size and x.ndim == 4:
        k = _holder(x.dtype.name, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))
        fn = None if k is None else k.get()
        if fn is not None:
            oh, ow = _out_hw(x.shape[2], x.shape[3], kernel, stride, padding, dilation)
            psize = 2 * n * c * oh * ow
            out = np.empty(psize + 2 * c, x.dtype)
            l = x.size // (n * c)
            args = (*_bnk._flat(x), n, c, l, x.shape[2], x.shape[3],
                    np.ascontiguousarray(_bn._channels(weight, np, c)),
                    np.ascontiguousarray(_bn._channels(bias, np, c)), float(eps),
                    out[:psize].reshape(2, n, c, oh, ow), out[psize:].reshape(2, c))
            _sharepool.split(lambda c0, c1: fn(*args, c0, c1), c, _bnk._ELEMENT_WORK * x.size)
            return out
    # the composition this op stands for, each part as the CPU runs it (while `k` compiles,
    # its parts' kernels are asked for only until `k` is in: loader.standing_in)
    with _standing_in(k):
        r = _bn.BATCH_NORM_FORWARD.run(np, x, weight, bias, eps=eps)
        y = r[:x.size].reshape(x.shape)
        rec = _po.MAX_POOL2D_WITH_OFFSETS.run(np, y, kernel=kernel, stride=stride, padding=padding,
                                              dilation=dilation)
    return np.concatenate([np.ascontiguousarray(rec).reshape(-1), r[x.size:]])


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
