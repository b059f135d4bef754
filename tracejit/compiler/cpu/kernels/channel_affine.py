"""CPU kernels of the per-channel affine ``x * w[c] + b[c]`` and its backward
(ops/channel_affine_prim.py): one pass over an (N, C, L) operand each way.

numpy's broadcast forms cost two passes forward (a fresh result's pages faulted in by the
product, then the sum) and, backward, a product, the einsum sums of g and g * x, each a
walk of its own. Here the forward writes each channel's run once, and the backward reads
g and x once, writing ``g * w`` while it sums g and g * x per run. The sums take each
run's terms in float64 (reassociated into vector lanes: bits independent of thread count,
one thread), so they are at least as exact as numpy's pairwise float32 sums. Loaded with
loader.py's policy; one kernel per dtype and bias flag.
"""
from __future__ import annotations

import numpy as np

from .loader import kernel as _kernel, takes

__all__ = ["forward", "backward"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_FORWARD = '''
import numpy as np
from numba import njit


@njit("void(Array({t}, 3, 'C', readonly=True), Array({t}, 1, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), {t}[:, :, ::1], int64)",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(x, w, b, out, has_b):
    """y = x * w[c] (+ b[c]) per (N, C, L) run"""
    n, c, m = x.shape
    for i in range(n):
        for j in range(c):
            a = w[j]
            src = x[i, j]
            dst = out[i, j]
            if has_b:
                d = b[j]
                for k in range(m):
                    dst[k] = src[k] * a + d
            else:
                for k in range(m):
                    dst[k] = src[k] * a
'''

_BACKWARD = '''
import numpy as np
from numba import njit


@njit("void(Array({t}, 3, 'C', readonly=True), Array({t}, 3, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), {t}[:, :, ::1], float64[::1], float64[::1])",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True, fastmath={{'reassoc'}})
def kernel(g, x, w, dx, dw, db):
    """dx = g * w[c]; dw[c] = sum g * x, db[c] = sum g over N and L (float64 sums)"""
    n, c, m = g.shape
    for j in range(c):
        dw[j] = 0.0
        db[j] = 0.0
    for i in range(n):
        for j in range(c):
            a = w[j]
            gr = g[i, j]
            xr = x[i, j]
            out = dx[i, j]
            s0 = 0.0
            s1 = 0.0
            for k in range(m):
                v = gr[k]
                out[k] = v * a
                s0 += np.float64(v)
                s1 += np.float64(v) * np.float64(xr[k])
            db[j] += s0
            dw[j] += s1
'''


def _loaded(which: str, source: str, dt: np.dtype):
    def text():
        return source.replace("{t}", dt.name).replace("{{", "{").replace("}}", "}")
    return _kernel(("channel_affine", which, dt.name), text).get()


def _rows(a, n: int, c: int):
    """`a` as its C-contiguous (N, C, L) view, or None."""
    return a.reshape(n, c, -1) if a.flags.c_contiguous else None


def forward(x, *wb, has_w, has_b):
    """channel_affine's result, or None (no weight, another dtype or layout, not loaded)."""
    dt = x.dtype
    if not has_w or x.ndim < 2 or dt not in _DTYPES or not x.size or not takes(np, x, *wb):
        return None
    n, c = x.shape[0], x.shape[1]
    x3 = _rows(x, n, c)
    if x3 is None or any(a.dtype != dt for a in wb):
        return None
    fn = _loaded("forward", _FORWARD, dt)
    if fn is None:
        return None
    out = np.empty(x.shape, dt)
    w = np.ascontiguousarray(wb[0])
    b = np.ascontiguousarray(wb[1]) if has_b else w
    fn(x3, w, b, out.reshape(x3.shape), int(has_b))
    return out


def backward(g, *xw, has_w, has_b):
    """channel_affine_backward's record ``[dx | dw | db]``, or None (as `forward`)."""
    dt = g.dtype
    if not has_w or g.ndim < 2 or dt not in _DTYPES or not g.size:
        return None
    x, w = xw
    if x.shape != g.shape or x.dtype != dt or w.dtype != dt or not takes(np, g, x, w):
        return None
    n, c = g.shape[0], g.shape[1]
    g3, x3 = _rows(g, n, c), _rows(x, n, c)
    if g3 is None or x3 is None:
        return None
    fn = _loaded("backward", _BACKWARD, dt)
    if fn is None:
        return None
    size = g.size
    out = np.empty(size + (2 if has_b else 1) * c, dt)
    sums = np.empty((2, c), np.float64)
    fn(g3, x3, np.ascontiguousarray(w), out[:size].reshape(g3.shape), sums[0], sums[1])
    out[size:size + c] = sums[0]
    if has_b:
        out[size + c:] = sums[1]
    return out
