"""Sampling an image at arbitrary points: ``affine_grid`` and ``grid_sample``.

Both are composites. ``affine_grid`` is one batched product of a constant grid of
normalized coordinates with the transforms. ``grid_sample`` turns the grid into pixel
coordinates, rounds them (nearest) or takes the four (bilinear) or sixteen (bicubic)
neighbours, and gathers the input at each one with integer indices: its gradient with
respect to the input is gather's (a scatter-add), and with respect to the grid it flows
through the interpolation weights, which are differentiable functions of the grid.
Padding modes as in PyTorch: ``zeros`` (neighbours outside read 0), ``border`` (coordinates
clipped to the edge), ``reflection`` (coordinates reflected at the edges).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from .creation import tensor
from .elementwise import abs as _abs, cast, clamp, floor, logical_and, remainder, where
from .indexing import gather
from .linalg import matmul
from .shape import expand, reshape, transpose
from . import autocast as _autocast

__all__ = ["affine_grid", "grid_sample"]


def _base_coords(n: int, align_corners: bool) -> np.ndarray:
    """PyTorch's normalized sample positions along a side of n pixels."""
    if n <= 1:
        return np.zeros(max(n, 0))
    c = np.linspace(-1.0, 1.0, n)
    return c if align_corners else c * (n - 1) / n


def affine_grid(theta, size, align_corners: bool = False):
    """Sampling grid (N, H, W, 2) for 2-D affine transforms theta (N, 2, 3), or (N, D, H, W, 3)
    for 3-D ones theta (N, 3, 4), ``size`` being the output's (N, C, H, W) / (N, C, D, H, W)."""
    size = tuple(int(s) for s in size)
    if len(size) == 4:
        want, (n, _, h, w) = (2, 3), size
        axes = [_base_coords(w, align_corners), _base_coords(h, align_corners)]
        shape = (h, w)
    elif len(size) == 5:
        want, (n, _, d, h, w) = (3, 4), size
        axes = [_base_coords(w, align_corners), _base_coords(h, align_corners),
                _base_coords(d, align_corners)]
        shape = (d, h, w)
    else:
        raise ShapeError(f"affine_grid: size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    if theta.ndim != 3 or tuple(theta.shape) != (n,) + want:
        raise ShapeError(f"affine_grid: expected theta of shape ({n}, {want[0]}, {want[1]}) for "
                         f"size {size}, got {tuple(theta.shape)}")
    if not theta.dtype.is_floating_point:
        raise TypeError(f"affine_grid: expected a floating point theta, got {theta.dtype.name}")
    # base[..., :] = (x, y[, z], 1) with x varying fastest, as PyTorch builds it
    mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]
    base = np.stack(list(mesh) + [np.ones(shape)], axis=-1).reshape(1, -1, want[1])
    base_t = tensor(base, dtype=theta.dtype, device=theta.device)
    grid = matmul(base_t, transpose(theta, 1, 2))               # (N, H*W, 2)
    return reshape(grid, (n,) + shape + (want[0],))


def _unnormalize(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    return ((coord + 1) * size - 1) / 2


def _reflect(x, lo2: float, hi2: float):
    """Reflect coordinates into [lo2/2, hi2/2] (PyTorch's reflect_coordinates)."""
    if lo2 == hi2:
        return x * 0
    lo, span = lo2 / 2, (hi2 - lo2) / 2
    x = _abs(x - lo)
    extra = remainder(x, span)
    flips = floor(x / span)
    even = remainder(flips, 2) == 0
    return where(even, extra + lo, span - extra + lo)


def _source_coord(coord, size: int, padding_mode: str, align_corners: bool):
    x = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        x = clamp(x, 0, size - 1)
    elif padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        x = clamp(x, 0, size - 1)
    return x


def _gather_at(flat, ix, iy, w: int, h: int, c: int, zeros: bool):
    """input values at integer pixel (iy, ix) per output point: flat (N, C, H*W), ix/iy
    (N, P) float tensors holding integers; points outside read 0 when `zeros`."""
    inside = None
    if zeros:
        inside = logical_and(logical_and(ix >= 0, ix <= w - 1), logical_and(iy >= 0, iy <= h - 1))
    xi = cast(clamp(ix, 0, w - 1), _dt.int64)
    yi = cast(clamp(iy, 0, h - 1), _dt.int64)
    idx = yi * w + xi                                             # (N, P)
    n, p = idx.shape
    vals = gather(flat, 2, expand(reshape(idx, (n, 1, p)), (n, c, p)))
    if inside is not None:
        vals = vals * cast(reshape(inside, (n, 1, p)), flat.dtype)
    return vals


def _cubic_weights(t):
    """PyTorch's bicubic convolution weights (A = -0.75) for the four taps around t in [0, 1)."""
    a = -0.75

    def near(x):   # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return far(t + 1), near(t), near(1 - t), far(2 - t)


@_autocast.fp32
def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners=None):
    """Sample `input` (N, C, H, W) at `grid` (N, Ho, Wo, 2) (x, y in [-1, 1]) -> (N, C, Ho, Wo)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', "
                         f"got {padding_mode!r}")
    if input.ndim != 4:
        raise NotImplementedError(f"grid_sample: only 4-D input (N, C, H, W) is supported, got "
                                  f"shape {tuple(input.shape)}")
    if grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise ShapeError(f"grid_sample: expected grid of shape ({input.shape[0]}, H_out, W_out, 2) "
                         f"for input {tuple(input.shape)}, got {tuple(grid.shape)}")
    if input.dtype is not grid.dtype:
        raise TypeError(f"grid_sample: input ({input.dtype.name}) and grid ({grid.dtype.name}) "
                        f"must have the same dtype")
    align_corners = bool(align_corners)
    n, c, h, w = input.shape
    ho, wo = grid.shape[1], grid.shape[2]
    g = reshape(grid, (n, ho * wo, 2))
    if mode == "bicubic":   # the padding applies to each tap, not to the point
        x = _unnormalize(g[:, :, 0], w, align_corners)
        y = _unnormalize(g[:, :, 1], h, align_corners)
    else:
        x = _source_coord(g[:, :, 0], w, padding_mode, align_corners)
        y = _source_coord(g[:, :, 1], h, padding_mode, align_corners)
    flat = reshape(input, (n, c, h * w))
    zeros = padding_mode == "zeros"
    if mode == "nearest":
        out = _gather_at(flat, _round_half_even(x), _round_half_even(y), w, h, c, zeros)
    elif mode == "bilinear":
        x0, y0 = floor(x), floor(y)
        tx, ty = x - x0, y - y0
        out = 0
        for dy, wy in ((0, 1 - ty), (1, ty)):
            for dx, wx in ((0, 1 - tx), (1, tx)):
                v = _gather_at(flat, x0 + dx, y0 + dy, w, h, c, zeros)
                out = out + v * reshape(wx * wy, (n, 1, -1))
    else:
        x0, y0 = floor(x), floor(y)
        wxs, wys = _cubic_weights(x - x0), _cubic_weights(y - y0)
        out = 0
        for j, wy in enumerate(wys):
            for i, wx in enumerate(wxs):
                xi, yi = x0 + (i - 1), y0 + (j - 1)
                if padding_mode != "zeros":   # each tap is clipped/reflected on its own
                    xi = _tap(xi, w, padding_mode, align_corners)
                    yi = _tap(yi, h, padding_mode, align_corners)
                v = _gather_at(flat, xi, yi, w, h, c, zeros)
                out = out + v * reshape(wx * wy, (n, 1, -1))
    return reshape(out, (n, c, ho, wo))


def _tap(i, size: int, padding_mode: str, align_corners: bool):
    if padding_mode == "reflection":
        i = _reflect(i, 0, 2 * (size - 1)) if align_corners else _reflect(i, -1, 2 * size - 1)
    return clamp(i, 0, size - 1)


def _round_half_even(x):
    """Round to the nearest integer, ties to even (nearbyint, as PyTorch's nearest mode)."""
    f = floor(x)
    d = x - f
    up = (d > 0.5) | ((d == 0.5) & (remainder(f, 2) == 1))
    return where(up, f + 1, f)
