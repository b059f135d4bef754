"""Training-mode BatchNorm's passes as numba loops: the CPU backend's implementations of
ops/batchnorm_prim.py's primitives (their records and numpy forms live there).

Each pass is one loop over (N, C, L) views of any strides (eager activations are often
channel-major, the conv GEMM's order); sums in float64 across blocks, so the variance does
not cancel. Output memory order is chosen for the next op: the normalized output is
C-contiguous (the ReLU after it runs on its flat path), the input gradient channel-major
(the rows of the convolution backward's GEMM, so no transposing copy there).
"""
from __future__ import annotations

import numpy as np

from ....ops.batchnorm_prim import (_channels, _count, _input_coefficients, _ncl_shape,
                                    _scale_shift)
from ..runtime import sharepool as _sharepool
from .loader import kernel as _kernel

__all__ = ["stats", "train", "backward_reduce", "backward_input", "backward", "forward"]

_HEAD = '''
import numpy as np
from numba import njit


@njit(inline='always', fastmath={'reassoc'})
def moments(x, sn, sc, n, l, ch, shift):
    """channel ch's sums of x - shift and (x - shift)**2"""
    s1 = 0.0
    s2 = 0.0
    for i in range(n):
        base = i * sn + ch * sc
        for k0 in range(0, l, BLOCK):
            row = x[base + k0:base + min(l, k0 + BLOCK)]
            a1 = np.{t}(0)
            a2 = np.{t}(0)
            for k in range(row.shape[0]):
                d = row[k] - shift
                a1 += d
                a2 += d * d
            s1 += a1
            s2 += a2
    return s1, s2


@njit(inline='always', fastmath={'reassoc'})
def grad_sums(g, gn, gc, x, sn, sc, n, l, ch, mu):
    """channel ch's sums of g and g * (x - mu)"""
    s1 = 0.0
    s2 = 0.0
    for i in range(n):
        gb = i * gn + ch * gc
        xb = i * sn + ch * sc
        for k0 in range(0, l, BLOCK):
            k1 = min(l, k0 + BLOCK)
            grow = g[gb + k0:gb + k1]
            xrow = x[xb + k0:xb + k1]
            a1 = np.{t}(0)
            a2 = np.{t}(0)
            for k in range(grow.shape[0]):
                gv = grow[k]
                a1 += gv
                a2 += gv * (xrow[k] - mu)
            s1 += a1
            s2 += a2
    return s1, s2


@njit(inline='always')
def affine(u, un, uc, v, vn, vc, n, l, ch, ac, bc, dc, out, on, oc):
    """channel ch of out = ac*u + bc*v + dc"""
    for i in range(n):
        urow = u[i * un + ch * uc:i * un + ch * uc + l]
        vrow = v[i * vn + ch * vc:i * vn + ch * vc + l]
        orow = out[i * on + ch * oc:i * on + ch * oc + l]
        for k in range(l):
            orow[k] = ac * urow[k] + bc * vrow[k] + dc


@njit(inline='always')
def channel_grad(g, gn, gc, x, sn, sc, n, c, l, ch, mean, rstd, weight, out):
    """channel ch of batch_norm_backward's record into out: out[c*n*l + ch] = sum g,
    out[c*n*l + c + ch] = sum g*xhat (rounded to the data's dtype, as the two-primitive form
    stores them), out[ch*n*l:(ch+1)*n*l] = the input gradient a*g + b*x + d in (N, L) order."""
    count = n * l
    s1, s2 = grad_sums(g, gn, gc, x, sn, sc, n, l, ch, np.{t}(mean[ch]))
    r0 = np.{t}(s1)
    r1 = np.{t}(s2 * rstd[ch])
    out[c * count + ch] = r0
    out[c * count + c + ch] = r1
    a = weight[ch] * rstd[ch]
    b = -a * rstd[ch] * np.float64(r1) / count
    d = -a * np.float64(r0) / count - b * mean[ch]
    affine(g, gn, gc, x, sn, sc, n, l, ch, np.{t}(a), np.{t}(b), np.{t}(d), out, l, count)

'''
# Operands reach the kernels as flat buffers plus the element strides of N and C: each
# (n, c) run of L elements is contiguous and taken as a slice, so the inner loops vectorize
# (numba's 'A' arrays, whose inner stride is unknown, do not; nor did index arithmetic on
# the flat buffer: 2-4 ms per pass over LeNet's first activation, 0.3 ms as slices). Sums
# run in the data's dtype over blocks of at most BLOCK elements (reassociated, so they
# vectorize) and in float64 across blocks.
_RO = "Array({t}, 1, 'C', readonly=True)"

_STATS = _HEAD + '''
@njit("void(" + RO + ", int64, int64, int64, int64, int64, float64[:, ::1], int64, int64)",
      cache=CACHE, error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(x, sn, sc, n, c, l, out, c0, c1):
    """per channel: mean and biased variance (sums of x - shift); channels c0..c1-1"""
    count = n * l
    for ch in range(c0, c1):
        shift = x[ch * sc]
        s1, s2 = moments(x, sn, sc, n, l, ch, shift)
        m = s1 / count
        out[0, ch] = shift + m
        out[1, ch] = max(s2 / count - m * m, 0.0)
'''

_REDUCE = _HEAD + '''
@njit("void(" + RO + ", int64, int64, " + RO + ", int64, int64, int64, int64, int64, "
      "float64[::1], float64[:, ::1])", cache=CACHE, error_model='numpy', boundscheck=False,
      fastmath={'reassoc'})
def kernel(g, gn, gc, x, sn, sc, n, c, l, mean, out):
    """per channel: sum of g, sum of g * (x - mean)"""
    for ch in range(c):
        s1, s2 = grad_sums(g, gn, gc, x, sn, sc, n, l, ch, np.{t}(mean[ch]))
        out[0, ch] = s1
        out[1, ch] = s2
'''

_AFFINE = _HEAD + '''
@njit("void(" + RO + ", int64, int64, " + RO + ", int64, int64, int64, int64, int64, "
      "float64[::1], float64[::1], float64[::1], {t}[::1], int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False)
def kernel(u, un, uc, v, vn, vc, n, c, l, a, b, d, out, on, oc):
    """out = a*u + b*v + d per channel (coefficients rounded to the data's dtype)"""
    for ch in range(c):
        affine(u, un, uc, v, vn, vc, n, l, ch, np.{t}(a[ch]), np.{t}(b[ch]), np.{t}(d[ch]), out, on, oc)
'''
# The whole backward in one kernel (batch_norm_backward): per channel, the two sums, then
# the input gradient from the same (g, x) run while it is still in cache (one channel of
# LeNet's first activation, g and x: ~350 KB). Reading g and x once from memory instead of
# twice (reduce, then input) is most of the gain: the passes are bandwidth bound.
_BACKWARD = _HEAD + '''
@njit("void(" + RO + ", int64, int64, " + RO + ", int64, int64, int64, int64, int64, "
      "float64[::1], float64[::1], float64[::1], {t}[::1], int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(g, gn, gc, x, sn, sc, n, c, l, mean, rstd, weight, out, c0, c1):
    """per channel ch: `channel_grad` (the two sums, then the input gradient channel-major);
    channels c0..c1-1"""
    for ch in range(c0, c1):
        channel_grad(g, gn, gc, x, sn, sc, n, c, l, ch, mean, rstd, weight, out)
'''
# Statistics and normalization in one kernel (batch_norm_forward): per channel, the sums,
# then the normalized output from the same run of x while it is in cache (one channel of
# LeNet's first activation: 173 KB), so x is read once from memory instead of twice.
_FORWARD = _HEAD + '''
@njit("void(" + RO + ", int64, int64, int64, int64, int64, float64[::1], float64[::1], float64, "
      "{t}[::1], int64, int64, {t}[:, ::1], int64, int64)", cache=CACHE, error_model='numpy',
      boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(x, sn, sc, n, c, l, weight, bias, eps, out, on, oc, stats, c0, c1):
    """per channel: stats[:, ch] = mean and biased variance (rounded to the data's dtype, as
    batch_norm_stats stores them), then out = (x - mean) * rsqrt(var + eps) * weight + bias;
    channels c0..c1-1"""
    count = n * l
    for ch in range(c0, c1):
        shift = x[ch * sc]
        s1, s2 = moments(x, sn, sc, n, l, ch, shift)
        m = s1 / count
        mean = np.{t}(shift + m)
        var = np.{t}(max(s2 / count - m * m, 0.0))
        stats[0, ch] = mean
        stats[1, ch] = var
        a = weight[ch] / np.sqrt(np.float64(var) + eps)
        dd = bias[ch] - np.float64(mean) * a
        ac = np.{t}(a)
        dc = np.{t}(dd)
        for i in range(n):
            xrow = x[i * sn + ch * sc:i * sn + ch * sc + l]
            orow = out[i * on + ch * oc:i * on + ch * oc + l]
            for k in range(l):
                orow[k] = ac * xrow[k] + dc
'''
BLOCK = 4096

# The one-pass forward and backward kernels do a range of channels (each channel's sums,
# statistics and outputs are its own), so `sharepool.split` shares a call over the cores
# (runtime/sharepool.py; the kernels are nogil). An element costs about what this many
# multiply-adds of a BLAS product do (sharepool.split's unit): LeNet's two BatchNorms
# (1.4M and 0.5M elements, ~0.5-1 ms a pass on one thread) both split.
_ELEMENT_WORK = 16


def _run(template, name, dtype):
    if dtype not in ("float32", "float64"):
        return None
    return _kernel(("batchnorm", name, dtype), lambda: template.replace(
        '" + RO + "', _RO).replace("{t}", dtype).replace("BLOCK", str(BLOCK)), steady=True).get()


def _flat(a):
    """(flat buffer from a's first element, element stride of N, of C) of a's (N, C, L)
    view; a copy first when the L runs are not contiguous."""
    a3 = a.reshape(a.shape[0], a.shape[1], -1)
    item = a3.itemsize
    if a3.shape[2] > 1 and a3.strides[2] != item or any(s < 0 or s % item for s in a3.strides):
        a3 = np.ascontiguousarray(a3)
    n, c, l = a3.shape
    sn, sc = a3.strides[0] // item, a3.strides[1] // item
    extent = 1 + (n - 1) * sn + (c - 1) * sc + (l - 1)
    flat = np.lib.stride_tricks.as_strided(a3, (extent,), (item,), writeable=False)
    return flat, sn, sc


def _out_like(x, channel_major: bool = False):
    """An output of x's shape and dtype, C-contiguous or channel-major ((C, N, ...)
    memory), with its flat buffer and strides (written through the buffer)."""
    if channel_major:
        out = np.empty((x.shape[1], x.shape[0]) + x.shape[2:], x.dtype).swapaxes(0, 1)
    else:
        out = np.empty(x.shape, x.dtype)
    flat, sn, sc = _flat(out)
    return out, np.lib.stride_tricks.as_strided(out, flat.shape, flat.strides), sn, sc


# ---------------------------------------------------------------- the primitives' implementations
# (registered by compiler/cpu/implementations.py for numpy float32/float64 operands; None
# while a kernel is not loaded: the numpy form runs)
def stats(x, scratch=None):
    if not x.size:
        return None
    fn = _run(_STATS, "stats", x.dtype.name)
    if fn is None:
        return None
    out = np.empty((2, x.shape[1]), np.float64)
    args = (*_flat(x), *_ncl_shape(x), out)
    _sharepool.split(lambda c0, c1: fn(*args, c0, c1), x.shape[1], _ELEMENT_WORK * x.size // 2)
    return out.astype(x.dtype)


def train(x, stats, weight, bias, eps, out=None):
    if not x.size:
        return None
    fn = _run(_AFFINE, "affine", x.dtype.name)
    if fn is None:
        return None
    c = x.shape[1]
    mean, var = stats[0].astype(np.float64), stats[1].astype(np.float64)
    a, d = _scale_shift(np, _channels(weight, np, c), _channels(bias, np, c), mean, var, eps)
    # C-contiguous whatever x's order: the elementwise ops after it (ReLU) then run on
    # their flat fast path, compiled or eager.
    res, buf, on, oc = _out_like(x)
    xf = _flat(x)
    fn(*xf, *xf, *_ncl_shape(x), a, np.zeros(c), d, buf, on, oc)
    if out is None:
        return res
    out[...] = res
    return out


def backward_reduce(g, x, stats, eps, scratch=None, g_like_x=None):
    if not x.size:
        return None
    fn = _run(_REDUCE, "reduce", x.dtype.name)
    if fn is None:
        return None
    mean = stats[0].astype(np.float64)
    rstd = 1.0 / np.sqrt(stats[1].astype(np.float64) + eps)
    out = np.empty((2, x.shape[1]), np.float64)
    fn(*_flat(g), *_flat(x), *_ncl_shape(x), np.ascontiguousarray(mean), out)
    out[1] *= rstd
    return out.astype(x.dtype)


def backward_input(g, x, stats, weight, red, eps, out=None, spare=None):
    if not x.size:
        return None
    fn = _run(_AFFINE, "affine", x.dtype.name)
    if fn is None:
        return None
    c = x.shape[1]
    mean, var = stats[0].astype(np.float64), stats[1].astype(np.float64)
    rstd = 1.0 / np.sqrt(var + eps)
    a, b, d = _input_coefficients(_channels(weight, np, c), rstd, mean, red[0].astype(np.float64),
                                  red[1].astype(np.float64), _count(x.shape))
    # Channel-major (C, N, ...) memory: what a convolution's backward multiplies ((C, N*L)
    # rows of its GEMM), so the transposing copy before it disappears.
    res, buf, on, oc = _out_like(x, channel_major=x.ndim > 2)
    fn(*_flat(g), *_flat(x), *_ncl_shape(x), a, b, d, buf, on, oc)
    if out is None:
        return res
    out[...] = res
    return out


def backward(g, x, stats, weight, eps):
    if not x.size:
        return None
    fn = _run(_BACKWARD, "backward", x.dtype.name)
    if fn is None:
        return None
    c = x.shape[1]
    mean = np.ascontiguousarray(stats[0], np.float64)
    rstd = 1.0 / np.sqrt(stats[1].astype(np.float64) + eps)
    out = np.empty(c * _count(x.shape) + 2 * c, x.dtype)
    args = (*_flat(g), *_flat(x), *_ncl_shape(x), mean, rstd,
            np.ascontiguousarray(_channels(weight, np, c)), out)
    _sharepool.split(lambda c0, c1: fn(*args, c0, c1), c, _ELEMENT_WORK * x.size)
    return out


def forward(x, weight, bias, eps):
    c, size = x.shape[1], x.size
    if not size:
        return None
    fn = _run(_FORWARD, "forward", x.dtype.name)
    if fn is None:
        return None
    rec = np.empty(size + 2 * c, x.dtype)
    n, _, l = _ncl_shape(x)
    args = (*_flat(x), n, c, l, np.ascontiguousarray(_channels(weight, np, c)),
            np.ascontiguousarray(_channels(bias, np, c)), float(eps), rec[:size], c * l, l,
            rec[size:].reshape(2, c))
    _sharepool.split(lambda c0, c1: fn(*args, c0, c1), c, _ELEMENT_WORK * size)
    return rec
