"""Op records for tracejit/ops/pooling_prim.py: max_pool2d / avg_pool2d as primitives over
the window offsets. Ties (integer-valued floats) check that the gradient goes to the first
maximum in row-major window order, as PyTorch's (compared with torch's gradient; finite
differences are meaningless at a tie); distinct values check finite differences and second
derivatives over overlapping windows, padding and dilation; ``return_indices`` is compared
with a numpy argmax, with ceil_mode too. The numpy references stack the windows (tests/opdb.py `_np_pool`)."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, F, Sample, _np_pool, arr, distinct, register


def _ties(rng, shape, dtype):
    """Integer-valued floats in {0, 1, 2}: most windows hold several equal maxima."""
    return rng.integers(0, 3, shape).astype(dtype.np)


_GEOMETRIES = [
    ((2, 3, 6, 6), {"kernel_size": 2}),
    ((2, 2, 7, 7), {"kernel_size": 3, "stride": 1, "padding": 1}),         # overlapping, padded
    ((1, 2, 7, 8), {"kernel_size": (3, 2), "stride": (2, 1)}),              # overlapping rows
    ((1, 2, 8, 8), {"kernel_size": 2, "stride": 1, "dilation": 2}),         # dilated, overlapping
    ((1, 1, 9, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": (1, 2)}),
]

register("max_pool2d.ties", lambda m, x, **kw: F(m).max_pool2d(x, **kw), _np_pool,
         lambda d, r: [Sample((_ties(r, shape, d),), kw, check_fd=False, desc="ties")
                       for shape, kw in _GEOMETRIES]
         + [Sample((_ties(r, (3, 6, 6), d),), {"kernel_size": 3, "stride": 1},
                   check_fd=False, desc="unbatched ties")],
         dtypes=FLOATS)
register("max_pool2d.offsets", lambda m, x, **kw: F(m).max_pool2d(x, **kw), _np_pool,
         lambda d, r: [Sample((distinct(r, shape, d),), kw) for shape, kw in _GEOMETRIES],
         dtypes=FLOATS)


def _np_pool_indices(x, kernel_size, stride=None, padding=0, dilation=1):
    """(max, flat index into H*W of the first maximum), by stacking window positions."""
    n, c, h, w = x.shape
    pos = np.arange(h * w, dtype=np.float64).reshape(1, 1, h, w) * np.ones((n, c, 1, 1))
    out = _np_pool(x, kernel_size, stride, padding, dilation)
    # window entries as rows: argmax of the stacked values (np.argmax takes the first)
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    wins = np.stack([_np_pool(x, kernel_size, stride, padding, dilation, reduce=_pick(i))
                     for i in range(k[0] * k[1])], axis=2)
    where = np.stack([_np_pool(pos, kernel_size, stride, padding, dilation, reduce=_pick(i),
                               pad_value=-1.0) for i in range(k[0] * k[1])], axis=2)
    first = np.argmax(wins, axis=2)[:, :, None]
    return out, np.take_along_axis(where, first, axis=2)[:, :, 0].astype(np.int64)


def _pick(i):
    return lambda wins, axis: np.take(wins, i, axis=axis)


register("max_pool2d.indices",
         lambda m, x, **kw: F(m).max_pool2d(x, return_indices=True, **kw), _np_pool_indices,
         lambda d, r: [Sample((_ties(r, shape, d),), kw, desc="ties")
                       for shape, kw in _GEOMETRIES]
         + [Sample((distinct(r, shape, d),), kw) for shape, kw in _GEOMETRIES[:2]],
         dtypes=FLOATS, grad=False)

def _np_first_max(x, windows):
    """(max, flat H*W index of the first maximum) per window; `windows(i, j)` lists the
    (row, col) input positions of output (i, j) in row-major window order."""
    n, c, h, w = x.shape
    oh, ow = windows.shape
    vals, idx = np.empty((n, c, oh, ow)), np.empty((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            flat = np.array([r * w + q for r, q in windows[i, j]])
            win = x.reshape(n, c, h * w)[:, :, flat]
            first = np.argmax(win, axis=2)
            vals[:, :, i, j] = np.take_along_axis(win, first[:, :, None], 2)[:, :, 0]
            idx[:, :, i, j] = flat[first]
    return vals, idx


def _np_pool_indices_ceil(x, kernel_size, stride, padding=0, dilation=1, ceil_mode=True):
    """max_pool2d with ceil_mode's windows (the last may start past the right padding's
    reach only inside the input or the left padding) by looping over them."""
    h, w = x.shape[2:]
    k, s, p, d = kernel_size, stride, padding, dilation

    def count(size):
        o = -(-(size + 2 * p - d * (k - 1) - 1) // s) + 1
        return o - 1 if (o - 1) * s >= size + p else o
    oh, ow = count(h), count(w)
    windows = np.empty((oh, ow), object)
    for i in range(oh):
        for j in range(ow):
            windows[i, j] = [(i * s - p + a * d, j * s - p + b * d) for a in range(k) for b in range(k)
                             if 0 <= i * s - p + a * d < h and 0 <= j * s - p + b * d < w]
    return _np_first_max(x, windows)


# ceil_mode's extra windows reach past the input: their indices still count in its H*W
register("max_pool2d.indices_ceil",
         lambda m, x, **kw: F(m).max_pool2d(x, return_indices=True, ceil_mode=True, **kw),
         lambda x, **kw: _np_pool_indices_ceil(x, **kw),
         lambda d, r: [Sample((_ties(r, (2, 3, 7, 8), d),), {"kernel_size": 3, "stride": 2}, desc="ties"),
                       Sample((distinct(r, (1, 2, 6, 9), d),), {"kernel_size": 2, "stride": 2, "padding": 1}),
                       Sample((_ties(r, (1, 2, 9, 7), d),), {"kernel_size": 3, "stride": 3, "dilation": 2},
                              desc="dilated ties")],
         dtypes=FLOATS, grad=False)

register("avg_pool2d.offsets", lambda m, x, **kw: F(m).avg_pool2d(x, **kw),
         lambda x, **kw: _np_pool(x, **kw, reduce=np.mean, pad_value=0.0),
         lambda d, r: [Sample((arr(r, (2, 2, 7, 7), d),), {"kernel_size": 3, "stride": 1, "padding": 1}),
                       Sample((arr(r, (1, 2, 7, 8), d),), {"kernel_size": (3, 2), "stride": (2, 1)}),
                       Sample((arr(r, (1, 1, 9, 9), d),), {"kernel_size": 3, "stride": 2, "padding": 1})],
         dtypes=FLOATS)
