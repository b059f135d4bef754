"""Fractional max pooling (``F.fractional_max_pool2d`` / ``3d``): max over windows whose
starts are spread pseudo-randomly over the input, one sequence per (N, C) plane and axis.

The starts are PyTorch's: with ``alpha = (in - k) / (out - 1)`` and the plane's sample u
in [0, 1), ``start_i = int((i + u) * alpha) - int(u * alpha)`` in the input's dtype, and
the last window ends at the input's end. They are tensor arithmetic on the samples, so a
compiled function draws and uses them like any other tensor. The (N, C, O, K) table of
flat input positions is gathered, the first maximum of each window (in window order, as
PyTorch scans) picked, and the output gathered at its position: the gradient goes to
that position only.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from .creation import arange
from .elementwise import cast, where
from .indexing import gather
from .pooling_nd import _last_nan, _ranked
from .random import rand
from .reductions import argmax
from .shape import expand, reshape, squeeze, unsqueeze
from . import autocast as _autocast

__all__ = ["fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
           "fractional_max_pool3d_with_indices"]

_AXES = {2: ("height", "width"), 3: ("time", "height", "width")}
# which column of a plane's samples each spatial axis reads (PyTorch's order: 2-D W first)
_SAMPLE_COLUMN = {2: (1, 0), 3: (0, 1, 2)}


def _tuple(v, n: int, what: str, op: str) -> tuple:
    t = (v,) * n if isinstance(v, (int, float, np.integer, np.floating)) else tuple(v)
    if len(t) != n:
        raise ValueError(f"{op}: {what} must be a number or a {n}-tuple, got {v!r}")
    return t


def _starts(u, size: int, k: int, out: int, dtype):
    """(N, C, out) int64 window starts along one axis from the (N, C) samples `u`."""
    i = arange(out, dtype=dtype, device=u.device)
    if out > 1:
        alpha = float(np.asarray(size - k, dtype.np) / np.asarray(out - 1, dtype.np))
        u = unsqueeze(u, -1)
        s = cast((i + u) * alpha, _dt.int64) - cast(u * alpha, _dt.int64)
    else:  # one window or none: no samples read, the starts keep the (N, C, out) shape
        s = expand(cast(i, _dt.int64), tuple(u.shape) + (out,))
    return where(i == out - 1, size - k, s)


def _fractional(input, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                _random_samples=None, *, n, op, with_indices=False):
    """Fractional max pooling over (N, C, *spatial) or unbatched (C, *spatial) input, n
    spatial dims; `_random_samples` (N, C, n) in [0, 1) fixes the windows (drawn with
    ``rand`` when not given)."""
    x, samples, return_indices = input, _random_samples, return_indices or with_indices
    if x.ndim not in (n + 1, n + 2):
        raise ShapeError(f"{op}: expected a {n + 1}-D or {n + 2}-D input, got shape {tuple(x.shape)}")
    unbatched = x.ndim == n + 1
    if unbatched:
        x = unsqueeze(x, 0)
    spatial = tuple(int(v) for v in x.shape[2:])
    k = tuple(int(v) for v in _tuple(kernel_size, n, "kernel_size", op))
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{op} requires specifying either an output_size or an output_ratio")
        ratio = _tuple(output_ratio, n, "output_ratio", op)
        output_size = tuple(int(s * r) for s, r in zip(spatial, ratio))
    outs = tuple(int(v) for v in _tuple(output_size, n, "output_size", op))
    for name, size, kk, o in zip(_AXES[n], spatial, k, outs):
        if o + kk - 1 > size or o < 0 or kk <= 0:   # (an output size of 0 is an empty output)
            raise RuntimeError(f"{op}(): pool {name} {kk} too large relative to input {name} {size}"
                               if o >= 0 and kk > 0 else f"{op}(): kernel_size must be positive and "
                               f"output_size non-negative, got {k} and {outs}")
    nb, c = int(x.shape[0]), int(x.shape[1])
    if samples is None:
        samples = rand(nb, c, n, dtype=x.dtype, device=x.device)
    elif tuple(samples.shape) != (nb, c, n):
        raise ShapeError(f"{op}: _random_samples should have shape {(nb, c, n)} (batch, channels, "
                         f"{n}), got {tuple(samples.shape)}")
    samples = cast(samples, x.dtype)
    flat = None
    for a in range(n):
        starts = _starts(samples[:, :, _SAMPLE_COLUMN[n][a]], spatial[a], k[a], outs[a], x.dtype)
        shape = [nb, c] + [1] * (2 * n)
        shape[2 + a] = outs[a]
        pos = reshape(starts, tuple(shape))
        koff = [1] * (2 * n + 2)
        koff[2 + n + a] = k[a]
        pos = (pos + reshape(arange(k[a], device=x.device), tuple(koff))) * int(np.prod(spatial[a + 1:]))
        flat = pos if flat is None else flat + pos
    o, kk = int(np.prod(outs)), int(np.prod(k))
    flat = reshape(flat, (nb, c, o, kk))
    xf = reshape(x, (nb, c, int(np.prod(spatial))))
    windows = reshape(gather(xf, -1, reshape(flat, (nb, c, o * kk))), (nb, c, o, kk))
    pick = _last_nan(windows, argmax(windows, -1, keepdim=True))   # (a NaN window: PyTorch's NaN)
    idx = squeeze(gather(flat, -1, pick), -1)
    out = reshape(gather(xf, -1, idx), (nb, c) + outs)
    idx = reshape(idx, (nb, c) + outs)
    if unbatched:
        out, idx = squeeze(out, 0), squeeze(idx, 0)
    return (out, idx) if return_indices else out


fractional_max_pool2d, fractional_max_pool3d = (_autocast.fp32(_ranked(_fractional, n, f"fractional_max_pool{n}d"))
                                                for n in (2, 3))
fractional_max_pool2d_with_indices, fractional_max_pool3d_with_indices = (
    _ranked(_fractional, n, f"fractional_max_pool{n}d_with_indices", with_indices=True) for n in (2, 3))
