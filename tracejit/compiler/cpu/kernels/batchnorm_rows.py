"""CPU kernels of BatchNorm's one-pass records (ops/batchnorm_prim.py) for one value per
channel and sample: BatchNorm1d's (N, C) input, C-contiguous.

The channel forms' kernels (channel_forms.py) walk channel by channel, which on (N, C)
memory is a stride-C walk per channel: ~6 ns an element, slower than the numpy form from
N*C ~ 4096 up. Here each pass walks the rows in order, the per-channel sums kept in a
float64 vector (the row's lanes), so every pass is a contiguous sweep. The input
gradient is written channel-major, as the record lays it out, a block of rows at a time.

Values are the numpy form's formulas, with float64 per-channel sums (at least as exact as
numpy's pairwise sums): the mean and biased variance rounded to x's dtype, the output
``x * a + d`` and the input gradient ``g * a + x * b + d`` per channel, each op rounded to
x's dtype. Loaded with loader.py's policy; one kernel per dtype and direction.
"""
from __future__ import annotations

import numpy as np

from .loader import entry, kernel as _kernel

__all__ = ["forward", "backward"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_FORWARD = '''
import numpy as np
from numba import njit


@njit("void(Array({t}, 2, 'C', readonly=True), Array({t}, 1, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), float64, {t}[::1])",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(x, w, b, eps, rec):
    """rec = [x * a + d | mean | biased variance] over the rows of x (N, C)"""
    n, c = x.shape
    size = n * c
    acc = np.zeros(c, np.float64)
    for i in range(n):
        for j in range(c):
            acc[j] += x[i, j]
    mean = np.empty(c, np.{t})
    for j in range(c):
        mean[j] = acc[j] / n
        acc[j] = 0.0
    for i in range(n):
        for j in range(c):
            d = np.float64(x[i, j] - mean[j])
            acc[j] += d * d
    a = np.empty(c, np.{t})
    d = np.empty(c, np.{t})
    for j in range(c):
        var = np.{t}(acc[j] / n)
        rec[size + j] = mean[j]
        rec[size + c + j] = var
        aj = np.float64(w[j]) / np.sqrt(np.float64(var) + eps)
        a[j] = aj
        d[j] = np.float64(b[j]) - np.float64(mean[j]) * aj
    for i in range(n):
        at = i * c
        for j in range(c):
            rec[at + j] = x[i, j] * a[j] + d[j]
'''

_BACKWARD = '''
import numpy as np
from numba import njit


@njit("void(Array({t}, 2, 'C', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "Array({t}, 2, 'C', readonly=True), Array({t}, 1, 'C', readonly=True), float64, {t}[::1])",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(g, x, stats, w, eps, out):
    """out = [input gradient, channel-major | sum g | sum g*xhat] over the rows of g, x (N, C)"""
    n, c = x.shape
    size = n * c
    s0 = np.zeros(c, np.float64)
    s1 = np.zeros(c, np.float64)
    for i in range(n):
        for j in range(c):
            gv = g[i, j]
            s0[j] += gv
            s1[j] += np.float64(gv) * np.float64(x[i, j] - stats[0, j])
    a = np.empty(c, np.{t})
    b = np.empty(c, np.{t})
    d = np.empty(c, np.{t})
    for j in range(c):
        mean = np.float64(stats[0, j])
        rstd = 1.0 / np.sqrt(np.float64(stats[1, j]) + eps)
        r0 = np.{t}(s0[j])
        r1 = np.{t}(s1[j] * rstd)
        out[size + j] = r0
        out[size + c + j] = r1
        aj = np.float64(w[j]) * rstd
        bj = -aj * rstd * np.float64(r1) / n
        a[j] = aj
        b[j] = bj
        d[j] = -aj * np.float64(r0) / n - bj * mean
    # channel-major writes, a block of rows at a time (the block's rows stay in cache
    # while each channel's run of it is written)
    for i0 in range(0, n, 16):
        i1 = min(i0 + 16, n)
        for j in range(c):
            aj = a[j]
            bj = b[j]
            dj = d[j]
            at = j * n
            for i in range(i0, i1):
                out[at + i] = g[i, j] * aj + x[i, j] * bj + dj
'''


_entries: dict = {}   # (direction, dtype) -> the loaded kernel's entry


def _loaded(which: str, source: str, dt: np.dtype):
    """The kernel's entry without numba's per-call type resolution (the callers pass the
    declared dtypes, ranks and contiguity), or None while it is not loaded."""
    return entry(_entries, (which, dt),
                 lambda: _kernel(("batchnorm_rows", which, dt.name), lambda: source.replace("{t}", dt.name)).get())


def _rows(a):
    """`a` (N, C, 1, ...) as its C-contiguous (N, C) view, or None: more than one value per
    channel and sample, another layout or dtype."""
    if a.dtype not in _DTYPES or a.ndim < 2 or a.size != a.shape[0] * a.shape[1] or not a.size:
        return None
    a2 = a.reshape(a.shape[0], a.shape[1])
    return a2 if a2.flags.c_contiguous else None


def _per_channel(a, dt, c: int):
    """A per-channel operand as a contiguous (C,) array of dtype `dt`, or None."""
    if type(a) is not np.ndarray or a.dtype != dt or a.size != c:
        return None
    return np.ascontiguousarray(a.reshape(c))


def forward(x, weight, bias, eps):
    """batch_norm_forward's record, or None (more than one value per channel and sample,
    another layout or dtype, the kernel not loaded)."""
    x2 = _rows(x) if type(x) is np.ndarray else None
    if x2 is None:
        return None
    dt, c = x2.dtype, x2.shape[1]
    w, b = _per_channel(weight, dt, c), _per_channel(bias, dt, c)
    if w is None or b is None:
        return None
    fn = _loaded("forward", _FORWARD, dt)
    if fn is None:
        return None
    rec = np.empty(x2.size + 2 * c, dt)
    fn(x2, w, b, float(eps), rec)
    return rec


def backward(g, x, stats, weight, eps):
    """batch_norm_backward's record, or None (as `forward`; a strided g is copied)."""
    x2 = _rows(x) if type(x) is np.ndarray else None
    if x2 is None or type(g) is not np.ndarray or g.shape != x.shape or g.dtype != x2.dtype:
        return None
    dt, c = x2.dtype, x2.shape[1]
    w = _per_channel(weight, dt, c)
    if w is None or type(stats) is not np.ndarray or stats.dtype != dt or stats.shape != (2, c):
        return None
    fn = _loaded("backward", _BACKWARD, dt)
    if fn is None:
        return None
    out = np.empty(x2.size + 2 * c, dt)
    fn(np.ascontiguousarray(g.reshape(x2.shape)), x2, np.ascontiguousarray(stats), w, float(eps), out)
    return out
