"""The CPU implementations of ops/sampling.py's primitives for 2-D bilinear and nearest
sampling: per image, one vectorized loop over its points finds each point's four corners
(flat indices and weights), then one loop per channel applies them; the backward makes
both gradients from one such pass.

The numpy form makes some sixty passes over the points (the taps, the padding, a gather
and a multiply per corner); here each point is read once. The images are independent
(the input gradient of image n is written by image n's points alone), so they are shared
over the process's threads (runtime/sharepool.py). Bicubic and 3-D sampling run the numpy
form. The kernels are typed for C-contiguous float32/float64 operands; others are made
C-contiguous first. None (the numpy form runs) while a kernel is not loaded.
"""
from __future__ import annotations

import numpy as np

from ..runtime import sharepool as _sharepool
from .loader import kernel as _kernel

__all__ = ["forward", "backward"]

_MODES = {"bilinear": 0, "nearest": 1}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}

# A point's corners, as ops/sampling.py's `_taps` makes them (PyTorch's grid sampler),
# found for an image's points in one loop (`_image`) into ii (4, P), the corners' flat
# indices (clipped into the image), and sw (8, P): each side's two weights (0 for a tap
# outside), x's then y's, then their derivatives in the grid's x and y. The corners'
# weights are products of a weight per side.
_CORNERS = '''
import numpy as np
from numba import njit


@njit(inline="always")
def _coord(c, a, b, top, lo, span, pad):
    # c * a + b (a pixel coordinate) after the padding mode, and its derivative in c
    x = c * a + b
    m = a
    if pad == 2:
        d = x - lo
        m = m if d >= 0 else -m
        d = abs(d)
        flips = np.floor(d / span)
        extra = d - flips * span
        odd = flips - 2.0 * np.floor(0.5 * flips)
        x = extra + odd * (span - 2.0 * extra) + lo
        m = m - 2.0 * odd * m
    if pad != 0:
        m = m if (x > 0.0) & (x < top) else 0.0
        x = x if x > 0.0 else 0.0
        x = x if x < top else top
    else:   # (far outside, or NaN: every corner reads 0)
        x = x if x > -2.0 else -2.0
        x = x if x < top + 2.0 else top + 2.0
    return x, m


@njit(inline="always")
def _side(x, top, nearest):
    # a side's two taps around x: clipped indices, weights, their derivatives in x
    x0 = np.rint(x) if nearest else np.floor(x)
    t = x - x0 if not nearest else 0.0
    m0 = 1.0 if (x0 >= 0.0) & (x0 <= top) else 0.0
    m1 = 0.0 if nearest else (1.0 if (x0 >= -1.0) & (x0 <= top - 1.0) else 0.0)
    a = x0 if x0 > 0.0 else 0.0
    b = x0 + 1.0 if x0 + 1.0 < top else top
    return int(a if a < top else top), int(b if b > 0.0 else 0.0), (1.0 - t) * m0, t * m1, -m0, m1


@njit(inline="always")
def _image(grid, n, h, w, mode, pad, align, ii, sw):
    # (one loop without branches on the points: it vectorizes)
    ax = (w - 1) / 2.0 if align else w / 2.0
    ay = (h - 1) / 2.0 if align else h / 2.0
    bx, by = (ax, ay) if align else (ax - 0.5, ay - 0.5)
    lo = 0.0 if align else -0.5
    spanx, spany = (w - 1.0, h - 1.0) if align else (float(w), float(h))
    nearest = mode == 1
    for p in range(grid.shape[1] // 2):
        ix, sx = _coord(grid[n, 2 * p], ax, bx, w - 1.0, lo, spanx, pad)
        iy, sy = _coord(grid[n, 2 * p + 1], ay, by, h - 1.0, lo, spany, pad)
        c0, c1, wx0, wx1, ex0, ex1 = _side(ix, w - 1.0, nearest)
        r0, r1, wy0, wy1, ey0, ey1 = _side(iy, h - 1.0, nearest)
        ii[0, p] = r0 * w + c0
        ii[1, p] = r0 * w + c1
        ii[2, p] = r1 * w + c0
        ii[3, p] = r1 * w + c1
        sw[0, p] = wx0
        sw[1, p] = wx1
        sw[2, p] = wy0
        sw[3, p] = wy1
        sx = 0.0 if nearest else sx   # (nearest: piecewise constant in the grid)
        sy = 0.0 if nearest else sy
        sw[4, p] = ex0 * sx
        sw[5, p] = ex1 * sx
        sw[6, p] = ey0 * sy
        sw[7, p] = ey1 * sy
'''

_FORWARD = _CORNERS + '''

@njit("void({t}[:, :, ::1], {t}[:, ::1], {t}[:, :, ::1], int64, int64, int64, int64, int64, int64, int64)",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(x, grid, out, h, w, mode, pad, align, lo, hi):
    npt = grid.shape[1] // 2
    ii = np.empty((4, npt), np.int64)
    sw = np.empty((8, npt), x.dtype)
    ww = np.empty((4, npt), x.dtype)
    for n in range(lo, hi):
        _image(grid, n, h, w, mode, pad, align, ii, sw)
        for p in range(npt):
            ww[0, p] = sw[0, p] * sw[2, p]
            ww[1, p] = sw[1, p] * sw[2, p]
            ww[2, p] = sw[0, p] * sw[3, p]
            ww[3, p] = sw[1, p] * sw[3, p]
        for c in range(x.shape[1]):
            xc = x[n, c]
            oc = out[n, c]
            for p in range(npt):
                oc[p] = (ww[0, p] * xc[ii[0, p]] + ww[1, p] * xc[ii[1, p]] + ww[2, p] * xc[ii[2, p]]
                         + ww[3, p] * xc[ii[3, p]])
'''

# gx (N, C, H*W) zeroed, or empty; dgrid (N, 2P), or empty: whichever is not empty is made
_BACKWARD = _CORNERS + '''

@njit("void({t}[:, :, ::1], {t}[:, ::1], {t}[:, :, ::1], {t}[:, :, ::1], {t}[:, ::1], int64, int64, "
      "int64, int64, int64, int64, int64)", cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(x, grid, g, gx, dgrid, h, w, mode, pad, align, lo, hi):
    npt = grid.shape[1] // 2
    ii = np.empty((4, npt), np.int64)
    sw = np.empty((8, npt), g.dtype)
    for n in range(lo, hi):
        _image(grid, n, h, w, mode, pad, align, ii, sw)
        if dgrid.shape[0] > 0:
            dg = dgrid[n]
            dg[:] = 0.0
            for c in range(g.shape[1]):
                gc = g[n, c]
                xc = x[n, c]
                for p in range(npt):
                    v0, v1, v2, v3 = xc[ii[0, p]], xc[ii[1, p]], xc[ii[2, p]], xc[ii[3, p]]
                    dg[2 * p] += gc[p] * (sw[2, p] * (v0 * sw[4, p] + v1 * sw[5, p])
                                          + sw[3, p] * (v2 * sw[4, p] + v3 * sw[5, p]))
                    dg[2 * p + 1] += gc[p] * (sw[6, p] * (v0 * sw[0, p] + v1 * sw[1, p])
                                              + sw[7, p] * (v2 * sw[0, p] + v3 * sw[1, p]))
        if gx.shape[0] > 0:
            for c in range(g.shape[1]):
                gc = g[n, c]
                d = gx[n, c]
                for p in range(npt):
                    gy0, gy1 = sw[2, p] * gc[p], sw[3, p] * gc[p]
                    d[ii[0, p]] += sw[0, p] * gy0
                    d[ii[1, p]] += sw[1, p] * gy0
                    d[ii[2, p]] += sw[0, p] * gy1
                    d[ii[3, p]] += sw[1, p] * gy1
'''


def _loaded(which: str, dtype, spatial: tuple, mode: str):
    """The kernel for `which`, or None: not loaded, or a call the numpy form runs."""
    if len(spatial) != 2 or mode not in _MODES or dtype not in (np.float32, np.float64):
        return None
    name = np.dtype(dtype).name
    source = _FORWARD if which == "forward" else _BACKWARD
    return _kernel(("grid_sample", which, name), lambda: source.replace("{t}", name)).get()


def _flat(a: np.ndarray, lead: int = 0) -> np.ndarray:
    """a as (N, lead, rest) C-contiguous (an image's channels) or, lead 0, (N, rest): a grid's
    points (x, y interleaved: a constant stride the point loop vectorizes over)."""
    return np.ascontiguousarray(a.reshape((a.shape[0], lead, -1) if lead else (a.shape[0], -1)))


def _run(fn, args: tuple, n: int, work: int) -> None:
    _sharepool.split(lambda lo, hi: fn(*args, lo, hi), n, work)


def _params(spatial, mode, padding, align) -> tuple:
    return int(spatial[0]), int(spatial[1]), _MODES[mode], _PADDINGS[padding], int(bool(align))


def forward(x, grid, mode, padding, align):
    """GRID_SAMPLE's CPU implementation (2-D, bilinear or nearest)."""
    from ....ops.sampling import nan_where_undefined
    fn = _loaded("forward", x.dtype, x.shape[2:], mode)
    if fn is None:
        return None
    n, c = x.shape[:2]
    g = _flat(grid)
    out = np.empty((n, c, g.shape[1] // 2), x.dtype)
    _run(fn, (_flat(x, c), g, out) + _params(x.shape[2:], mode, padding, align), n, 8 * out.size)
    return nan_where_undefined(np, out.reshape(x.shape[:2] + grid.shape[1:-1]), grid, x.shape[2:], mode, padding,
                               align)


def backward(g, grid, *x, spatial, mode, padding, align, input_grad):
    """GRID_SAMPLE_BACKWARD's CPU implementation: both gradients in one pass over the points."""
    fn = _loaded("backward", g.dtype, spatial, mode)
    if fn is None:
        return None
    n, c = g.shape[:2]
    gr = _flat(grid)
    size = n * c * int(spatial[0]) * int(spatial[1]) if input_grad else 0
    out = np.empty(size + (gr.size if x else 0), g.dtype)
    empty = np.empty((0, 0, 0), g.dtype)
    gx = out[:size].reshape(n, c, -1) if input_grad else empty
    gx.fill(0)
    dgrid = out[size:].reshape(gr.shape) if x else empty.reshape(0, 0)
    _run(fn, (_flat(x[0], c) if x else empty, gr, _flat(g, c), gx, dgrid) + _params(spatial, mode, padding, align),
         n, 8 * g.size)
    return out
