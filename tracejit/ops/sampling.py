"""Sampling an image at arbitrary points: ``affine_grid`` and ``grid_sample``.

``affine_grid`` is a composite: one batched product of a constant grid of normalized
coordinates with the transforms. ``grid_sample`` is two primitives, so a backend runs each
as one loop over the points (a composite of gathers made some hundred passes):

- ``grid_sample(x, grid)``: x (N, C, *S) sampled at grid (N, *So, d) -> (N, C, *So), S of
  d = 2 or 3 sides, the grid's last axis (x, y[, z]) in [-1, 1] across them;
- ``grid_sample_backward(g, grid[, x])``: the gradient of x (each point's output gradient
  added into the pixels it read, times their weights) and, given x, of the grid (through
  the weights), flat in one array.

Each point's pixel coordinate per side is rounded (nearest) or has two (bilinear) or four
(bicubic) taps with weights (`_taps`), and every combination of one tap per side is a
corner read at a flat index (`_corners`). Padding modes as in PyTorch: ``zeros`` (taps
outside read 0), ``border`` (coordinates clipped to the edge), ``reflection`` (reflected at
the edges); for bicubic each tap is clipped or reflected on its own.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import DTypeError, ShapeError
from .creation import tensor, zeros_like
from .eager import bind
from .linalg import matmul
from .registry import Aval, defprim
from .shape import reshape, transpose
from . import autocast as _autocast

__all__ = ["affine_grid", "grid_sample", "GRID_SAMPLE", "GRID_SAMPLE_BACKWARD"]

_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


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
    if len(size) not in (4, 5):
        raise ShapeError(f"affine_grid: size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    n, shape = size[0], size[2:]
    want = (len(shape), len(shape) + 1)
    axes = [_base_coords(s, align_corners) for s in shape[::-1]]
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


# ---------------------------------------------------------------- the numpy form
def _reflect(xp, x, lo2: float, hi2: float):
    """PyTorch's reflect_coordinates into [lo2/2, hi2/2], and its derivative (+-1)."""
    if lo2 == hi2:
        return x * 0, x * 0
    lo, span = lo2 / 2, (hi2 - lo2) / 2
    d = x - lo
    sign = xp.where(d < 0, -1.0, 1.0)
    d = xp.abs(d)
    odd = xp.fmod(xp.floor(d / span), 2) == 1
    extra = xp.fmod(d, span)
    return xp.where(odd, span - extra + lo, extra + lo), xp.where(odd, -sign, sign)


def _pad(xp, x, size: int, padding: str, align: bool):
    """Pixel coordinates x after the padding mode, and their derivative (0 where clipped)."""
    dx = xp.ones_like(x)
    if padding == "reflection":
        x, dx = _reflect(xp, x, 0, 2 * (size - 1)) if align else _reflect(xp, x, -1, 2 * size - 1)
    if padding != "zeros":
        dx = dx * ((x > 0) & (x < size - 1))
        x = xp.clip(x, 0, size - 1)
    return x, dx


def _cubic(t):
    """PyTorch's bicubic convolution weights (A = -0.75) of the four taps around t in [0, 1),
    each with its first and second derivatives in t."""
    a = -0.75

    def near(x):   # |x| <= 1
        return (((a + 2) * x - (a + 3)) * x * x + 1, (3 * (a + 2) * x - 2 * (a + 3)) * x,
                6 * (a + 2) * x - 2 * (a + 3))

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, (3 * a * x - 10 * a) * x + 8 * a, 6 * a * x - 10 * a
    (w0, d0, e0), (w1, d1, e1), (w2, d2, e2), (w3, d3, e3) = far(t + 1), near(t), near(1 - t), far(2 - t)
    return (w0, d0, e0), (w1, d1, e1), (w2, -d2, e2), (w3, -d3, e3)


def _taps(xp, coord, size: int, mode: str, padding: str, align: bool) -> list:
    """One side's taps of each point at normalized `coord`: [(index, weight, d weight /
    d coord, d2 weight / d coord2)], the index clipped into the side and the weights 0 where
    it reads outside."""
    scale = (size - 1) / 2 if align else size / 2
    x = (coord + 1) * scale - (0 if align else 0.5)
    if mode == "bicubic":
        x0 = xp.floor(x)
        taps = [(_pad(xp, x0 + (k - 1), size, padding, align)[0], w, dw * scale, ddw * scale * scale)
                for k, (w, dw, ddw) in enumerate(_cubic(x - x0))]
    else:
        x, dx = _pad(xp, x, size, padding, align)
        if mode == "nearest":
            taps = [(xp.rint(x), xp.ones_like(x), x * 0, x * 0)]
        else:
            x0 = xp.floor(x)
            t = x - x0
            taps = [(x0, 1 - t, -dx * scale, x * 0), (x0 + 1, t, dx * scale, x * 0)]
    out = []
    for i, *ws in taps:
        inside = (i >= 0) & (i <= size - 1)   # (False at NaN: such a point reads 0)
        out.append((xp.where(inside, i, 0).astype(xp.int64),) + tuple(xp.where(inside, w, 0) for w in ws))
    return out


def _corners(xp, grid, spatial: tuple, mode: str, padding: str, align: bool, second: bool = False):
    """Every corner of each point of grid (N, P, d): (flat index into the d sides (N, P),
    weight, [d weight / d grid[..., k] for each k]), and with `second` the matrix
    [[d2 weight / d grid[..., k] d grid[..., j]]]."""
    d = len(spatial)
    strides = [math.prod(spatial[d - k:]) for k in range(d)]    # of grid component k's side
    per_side = [_taps(xp, grid[..., k], spatial[d - 1 - k], mode, padding, align) for k in range(d)]
    for combo in itertools.product(*per_side):
        idx = sum(c[0] * s for c, s in zip(combo, strides))
        ws = [c[1] for c in combo]

        def times(k, f, j=None):   # f times the weights of the sides but k (and j)
            return f * math.prod(w for i, w in enumerate(ws) if i not in (k, j))
        dws = [times(k, c[2]) for k, c in enumerate(combo)]
        if not second:
            yield idx, math.prod(ws), dws
            continue
        yield idx, math.prod(ws), dws, [[times(k, c[3]) if j == k else times(k, c[2] * combo[j][2], j)
                                         for j in range(d)] for k, c in enumerate(combo)]


def _read(xp, xf, idx):
    """xf (N, C, L) at flat indices idx (N, P) -> (N, C, P)."""
    return xp.take_along_axis(xf, idx[:, None, :], 2)


def _flat(x, grid):
    n, c = x.shape[:2]
    return x.reshape(n, c, -1), grid.reshape(n, -1, grid.shape[-1])


def nan_where_undefined(xp, out, grid, spatial: tuple, mode: str, padding: str, align: bool):
    """`out` (N, C, *points) with NaN at the points whose interpolation weights are NaN, as
    PyTorch's weighted sum gives there though their corners read 0: a NaN or infinite
    coordinate that no padding clips (any padding for bicubic, whose weights come from the
    unpadded coordinate; zeros for bilinear). Nearest has no weights: it reads 0, and so
    does every volumetric (5-D) point, PyTorch's 3-D sampler skipping corners outside."""
    if mode == "nearest" or grid.shape[-1] != 2 or (mode == "bilinear" and padding != "zeros"):
        return out   # (border and reflection clip a bilinear point's coordinates first)
    bad = False
    for k in range(grid.shape[-1]):
        size = spatial[len(spatial) - 1 - k]
        scale = (size - 1) / 2 if align else size / 2
        bad = bad | ~xp.isfinite((grid[..., k] + 1) * scale)
    return xp.where(bad[:, None], xp.nan, out).astype(out.dtype, copy=False) if bad.any() else out


def _impl(xp, x, grid, mode, padding, align):
    xf, g = _flat(x, grid)
    out = 0
    for idx, w, _ in _corners(xp, g, x.shape[2:], mode, padding, align):
        out = out + _read(xp, xf, idx) * w[:, None, :]
    out = xp.asarray(out, dtype=x.dtype).reshape(x.shape[:2] + grid.shape[1:-1])
    return nan_where_undefined(xp, out, grid, x.shape[2:], mode, padding, align)


def _backward2_impl(xp, u, g, grid, x, *, spatial, mode, padding, align, input_grad):
    """GRID_SAMPLE_BACKWARD's VJP for cotangent u (its input part, then its grid part), x
    given: the gradients of g, x and the grid, flat in one array."""
    n, c = g.shape[:2]
    gf, gr = _flat(g, grid)
    xf = x.reshape(n, c, -1)
    k = xf.size if input_grad else 0
    uf, ug = u[:k].reshape(n, c, -1), u[k:].reshape(gr.shape)
    dg, dgrid = xp.zeros(gf.shape, dtype=g.dtype), xp.zeros(gr.shape, dtype=g.dtype)
    planes = xp.arange(n * c).reshape(n, c, 1) * xf.shape[2]
    idxs, vals = [], []
    for idx, w, dws, ddws in _corners(xp, gr, spatial, mode, padding, align, second=True):
        along = sum(ug[..., j] * dw for j, dw in enumerate(dws))   # d weight along ug
        xr = _read(xp, xf, idx)
        dg += xr * along[:, None, :]
        idxs.append((planes + idx[:, None, :]).ravel())
        vals.append((gf * along[:, None, :]).ravel())
        v = (xr * gf).sum(1)
        for j in range(len(dws)):
            dgrid[..., j] += v * sum(ug[..., i] * ddws[i][j] for i in range(len(dws)))
        if input_grad:
            ur = _read(xp, uf, idx)
            dg += ur * w[:, None, :]
            v = (ur * gf).sum(1)
            for j, dw in enumerate(dws):
                dgrid[..., j] += v * dw
    dx = xp.bincount(xp.concatenate(idxs), xp.concatenate(vals), minlength=xf.size)
    return xp.concatenate([p.astype(g.dtype).ravel() for p in (dg, dx, dgrid)])


def _backward_impl(xp, g, grid, *x, spatial, mode, padding, align, input_grad):
    n, c = g.shape[:2]
    gf, gr = _flat(g, grid)
    size = math.prod(spatial)
    planes = xp.arange(n * c).reshape(n, c, 1) * size
    idxs, vals = [], []
    dgrid = xp.zeros(gr.shape, dtype=g.dtype) if x else None
    for idx, w, dws in _corners(xp, gr, spatial, mode, padding, align):
        if input_grad:
            idxs.append((planes + idx[:, None, :]).ravel())
            vals.append((gf * w[:, None, :]).ravel())
        if x:
            v = (_read(xp, x[0].reshape(n, c, -1), idx) * gf).sum(1)
            for k, dw in enumerate(dws):
                dgrid[..., k] += v * dw
    parts = [xp.bincount(xp.concatenate(idxs), xp.concatenate(vals), minlength=n * c * size)] if input_grad else []
    return xp.concatenate([p.astype(g.dtype).ravel() for p in parts + ([dgrid] if x else [])])


# ---------------------------------------------------------------- rules and gradients
def _check(op: str, x_shape: tuple, grid: Aval, mode: str, padding: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be 'bilinear', 'nearest' or 'bicubic', got {mode!r}")
    if padding not in _PADDINGS:
        raise ValueError(f"{op}: padding_mode must be 'zeros', 'border' or 'reflection', got {padding!r}")
    d = len(x_shape) - 2
    if d not in (2, 3):
        raise ShapeError(f"{op}: expected 4-D (N, C, H, W) or 5-D (N, C, D, H, W) input, got shape "
                         f"{tuple(x_shape)}")
    if mode == "bicubic" and d != 2:
        raise ValueError(f"{op}: mode 'bicubic' takes 4-D input only, got shape {tuple(x_shape)}")
    if grid.ndim != d + 2 or grid.shape[-1] != d or grid.shape[0] != x_shape[0]:
        sides = ", ".join(["D_out", "H_out", "W_out"][3 - d:])
        raise ShapeError(f"{op}: expected grid of shape ({x_shape[0]}, {sides}, {d}) for input "
                         f"{tuple(x_shape)}, got {tuple(grid.shape)}")


def _rule(x: Aval, grid: Aval, mode, padding, align):
    _check("grid_sample", x.shape, grid, mode, padding)
    if x.dtype is not grid.dtype or not x.dtype.is_floating_point:
        raise DTypeError(f"grid_sample: input ({x.dtype.name}) and grid ({grid.dtype.name}) must have "
                         f"the same floating point dtype")
    return Aval(tuple(x.shape[:2]) + tuple(grid.shape[1:-1]), x.dtype, x.device)


def _vjp(g, out, x, grid, mode, padding, align, needs=(True, True)):
    grid_grad = needs[1] and mode != "nearest"   # (nearest: piecewise constant in the grid)
    if not (needs[0] or grid_grad):
        return None, zeros_like(grid)
    both = bind(GRID_SAMPLE_BACKWARD, g, grid, *((x,) if grid_grad else ()), spatial=tuple(x.shape[2:]),
                input_grad=bool(needs[0]), mode=mode, padding=padding, align=align)
    k = math.prod(x.shape) if needs[0] else 0
    gx = (reshape(both[:k], x.shape) if grid_grad else reshape(both, x.shape)) if needs[0] else None
    gg = (reshape(both[k:], grid.shape) if grid_grad else zeros_like(grid)) if needs[1] else None
    return gx, gg


def _backward_rule(g: Aval, grid: Aval, *x: Aval, spatial, mode, padding, align, input_grad):
    _check("grid_sample_backward", tuple(g.shape[:2]) + tuple(spatial), grid, mode, padding)
    size = math.prod(g.shape[:2]) * math.prod(spatial) if input_grad else 0
    return Aval((size + (math.prod(grid.shape) if x else 0),), g.dtype, g.device)


def _backward_vjp(u, out, g, grid, *x, spatial, mode, padding, align, input_grad, needs=(True,) * 3):
    params = dict(mode=mode, padding=padding, align=align)
    if x:   # the grid's gradient is in the output: the derivatives of its weights (GRID_SAMPLE_BACKWARD2)
        both = bind(GRID_SAMPLE_BACKWARD2, u, g, grid, x[0], spatial=spatial, input_grad=input_grad, **params)
        k, m = math.prod(g.shape), math.prod(x[0].shape)
        return reshape(both[:k], g.shape), reshape(both[k + m:], grid.shape), reshape(both[k:k + m], x[0].shape)
    # the input's gradient alone: linear in g, its transpose the forward; through the grid
    # the weights' derivatives read u as the forward reads x
    ux = reshape(u, tuple(g.shape[:2]) + tuple(spatial))
    gg = None
    if needs[1]:
        gg = zeros_like(grid) if mode == "nearest" else reshape(bind(
            GRID_SAMPLE_BACKWARD, g, grid, ux, spatial=spatial, input_grad=False, **params), grid.shape)
    return bind(GRID_SAMPLE, ux, grid, **params) if needs[0] else None, gg


def _backward2_rule(u: Aval, g: Aval, grid: Aval, x: Aval, spatial, mode, padding, align, input_grad):
    return Aval((math.prod(g.shape) + math.prod(x.shape) + math.prod(grid.shape),), g.dtype, g.device)


def _backward2_vjp(*args, **params):
    raise NotImplementedError("grid_sample: derivatives past the second through the grid are not supported")


def _saves(rq):
    """The input's gradient reads the grid; the grid's reads the input and the grid."""
    return (0, 1) if rq[1] else (1,)


_EXTRA = {"needs": True}
GRID_SAMPLE = defprim("grid_sample", _impl, _rule, _vjp, kind="other", save=_saves,
                      grad_name="GridSampler2DBackward0",
                      extra=dict(_EXTRA, meta=lambda rq: (0,) if rq[0] and not rq[1] else ()))
# (the input's gradient, then the grid's where x is given, flat in one array: one pass
# over the points finds each point's corners once for both)
GRID_SAMPLE_BACKWARD = defprim("grid_sample_backward", _backward_impl, _backward_rule, _backward_vjp,
                               kind="other", extra=_EXTRA)
GRID_SAMPLE_BACKWARD2 = defprim("grid_sample_backward2", _backward2_impl, _backward2_rule, _backward2_vjp,
                                kind="other")


@_autocast.fp32
def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners=None):
    """Sample `input` (N, C, H, W) at `grid` (N, Ho, Wo, 2) (x, y in [-1, 1]) -> (N, C, Ho, Wo),
    or (N, C, D, H, W) at (N, Do, Ho, Wo, 3) -> (N, C, Do, Ho, Wo)."""
    return bind(GRID_SAMPLE, input, grid, mode=mode, padding=padding_mode, align=bool(align_corners))
