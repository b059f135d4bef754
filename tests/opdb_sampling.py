"""Op records for tracejit/ops/sampling.py: affine_grid and grid_sample. The numpy
references compute each output point on its own (PyTorch's documented formulas: pixel
coordinates from normalized ones, the neighbours, their weights)."""
from __future__ import annotations

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


def _np_grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    n, c, h, w = x.shape
    _, ho, wo, _ = grid.shape
    out = np.zeros((n, c, ho, wo))

    def at(b, yi, xi):
        if padding_mode == "border":
            yi, xi = min(max(yi, 0), h - 1), min(max(xi, 0), w - 1)
        if 0 <= yi < h and 0 <= xi < w:
            return x[b, :, yi, xi]
        return np.zeros(c)
    for b in range(n):
        for i in range(ho):
            for j in range(wo):
                px = _pixel(grid[b, i, j, 0], w, align_corners)
                py = _pixel(grid[b, i, j, 1], h, align_corners)
                if padding_mode == "border":
                    px, py = min(max(px, 0), w - 1), min(max(py, 0), h - 1)
                if mode == "nearest":
                    out[b, :, i, j] = at(b, int(np.rint(py)), int(np.rint(px)))
                    continue
                x0, y0 = int(np.floor(px)), int(np.floor(py))
                tx, ty = px - x0, py - y0
                out[b, :, i, j] = (at(b, y0, x0) * (1 - tx) * (1 - ty) + at(b, y0, x0 + 1) * tx * (1 - ty)
                                   + at(b, y0 + 1, x0) * (1 - tx) * ty + at(b, y0 + 1, x0 + 1) * tx * ty)
    return out


def _grid_samples(d, r):
    x = arr(r, (2, 2, 4, 5), d)
    g = arr(r, (2, 3, 4, 2), d, low=-1.2, high=1.2)
    return [Sample((x, g), {"align_corners": False}),
            Sample((x, g), {"padding_mode": "border", "align_corners": True}),
            Sample((x, g), {"mode": "nearest", "align_corners": False}, grad=(0,))]


register("grid_sample", lambda m, x, g, **kw: NF(m).grid_sample(x, g, **kw), _np_grid_sample,
         _grid_samples, atol=1e-4, rtol=1e-4)
