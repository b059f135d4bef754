"""Op records for tracejit/ops/sampling.py: affine_grid and grid_sample. The numpy
references compute each output point on its own (PyTorch's documented formulas: pixel
coordinates from normalized ones, the neighbours, their weights)."""
from __future__ import annotations

import itertools

import numpy as np

from opdb import F, Sample, arr, register


def NF(m):
    import tracejit as tj
    return tj.nn.functional if m is tj else m.nn.functional


def _np_affine_grid(theta, size, align_corners=False):
    n, _, h, w = size

    def lin(k):
        c = np.linspace(-1, 1, k) if k > 1 else np.zeros(k)
        return c if align_corners else c * (k - 1) / k
    out = np.empty((n, h, w, 2))
    for i, y in enumerate(lin(h)):
        for j, x in enumerate(lin(w)):
            out[:, i, j] = theta @ np.array([x, y, 1.0])
    return out


register("affine_grid", lambda m, t, **kw: NF(m).affine_grid(t, **kw), _np_affine_grid,
         lambda d, r: [Sample((arr(r, (2, 2, 3), d),), {"size": (2, 3, 4, 5), "align_corners": False}),
                       Sample((arr(r, (1, 2, 3), d),), {"size": (1, 1, 3, 2), "align_corners": True})])


def _pixel(c, size, align_corners):
    return (c + 1) * (size - 1) / 2 if align_corners else ((c + 1) * size - 1) / 2


def _reflect(x, lo2, hi2):
    if lo2 == hi2:
        return 0.0
    lo, span = lo2 / 2, (hi2 - lo2) / 2
    d = abs(x - lo)
    flips = int(d // span)
    extra = d - flips * span
    return extra + lo if flips % 2 == 0 else span - extra + lo


def _padded(x, size, padding_mode, align_corners):
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    return x if padding_mode == "zeros" else min(max(x, 0), size - 1)


def _cubic(t, a=-0.75):
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _side_taps(c, size, mode, padding_mode, align_corners):
    """(pixel index, weight) of one side's taps at normalized coordinate c."""
    px = _pixel(c, size, align_corners)
    if mode == "bicubic":   # each tap padded on its own
        x0 = np.floor(px)
        return [(_padded(x0 - 1 + k, size, padding_mode, align_corners), w)
                for k, w in enumerate(_cubic(px - x0))]
    px = _padded(px, size, padding_mode, align_corners)
    if mode == "nearest":
        return [(np.rint(px), 1.0)]
    x0 = np.floor(px)
    return [(x0, 1 - (px - x0)), (x0 + 1, px - x0)]


def _np_grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """Each output point on its own: one side's taps per grid component (x across the last
    axis), every combination a pixel read (0 outside) times the product of its weights."""
    n, c = x.shape[:2]
    sides = x.shape[2:]
    out = np.zeros((n, c) + grid.shape[1:-1])
    for b in range(n):
        for pos in np.ndindex(*grid.shape[1:-1]):
            taps = [_side_taps(grid[(b,) + pos + (k,)], sides[-1 - k], mode, padding_mode, align_corners)
                    for k in range(len(sides))]
            for combo in itertools.product(*taps):
                at = tuple(int(i) for i, _ in reversed(combo))
                if all(0 <= i < s for i, s in zip(at, sides)):
                    out[(b, slice(None)) + pos] += x[(b, slice(None)) + at] * np.prod([w for _, w in combo])
    return out


def _grid_samples(d, r):
    x = arr(r, (2, 2, 4, 5), d)
    g = arr(r, (2, 3, 4, 2), d, low=-1.2, high=1.2)
    x3, g3 = arr(r, (2, 2, 3, 4, 3), d), arr(r, (2, 2, 3, 2, 3), d, low=-1.2, high=1.2)
    both = dict(gradgrad=False)   # (the second derivative through the grid is not supported)
    return [Sample((x, g), {"align_corners": False}, **both),
            Sample((x, g), {"padding_mode": "border", "align_corners": True}, **both),
            Sample((x, g), {"padding_mode": "reflection", "align_corners": False}, **both),
            Sample((x, g), {"padding_mode": "reflection", "align_corners": True}, **both),
            Sample((x, g), {"mode": "nearest", "align_corners": False}, grad=(0,)),
            Sample((x, g), {"mode": "nearest", "padding_mode": "reflection", "align_corners": True},
                   grad=(0,)),
            Sample((x, g), {"mode": "bicubic", "padding_mode": "border", "align_corners": False}, **both),
            Sample((x, g), {"mode": "bicubic", "align_corners": True}, grad=(0,)),
            Sample((x3, g3), {"align_corners": False}, **both),
            Sample((x3, g3), {"mode": "nearest", "padding_mode": "border", "align_corners": True},
                   grad=(0,))]


register("grid_sample", lambda m, x, g, **kw: NF(m).grid_sample(x, g, **kw), _np_grid_sample,
         _grid_samples, atol=1e-4, rtol=1e-4)
