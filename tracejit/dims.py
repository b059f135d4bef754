"""Dim arguments: one dim or a set of dims checked against a tensor's rank and made
non-negative, with PyTorch's errors (an IndexError naming the valid range, a repeated dim)."""
from __future__ import annotations

import numpy as np

from .errors import ShapeError


def normalize_dim(dim, ndim: int, op: str = "op") -> int:
    """`dim` in [0, ndim) (a 0-d tensor takes dims 0 and -1, as PyTorch); an IndexError
    naming `op` and the range when it is out of range, a TypeError when not an int."""
    if type(dim) is int:   # (the common case first: every reduction and cat asks)
        if 0 <= dim < ndim:
            return dim
        if -ndim <= dim < 0:
            return dim + ndim
    if isinstance(dim, np.integer) or eager_int_0d(dim):
        dim = int(dim)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    lo = -max(ndim, 1)
    hi = max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor of rank {ndim} "
                         f"(expected to be in range [{lo}, {hi}])")
    return dim % max(ndim, 1)


def normalize_dims(dims, ndim: int, op: str = "op") -> tuple:
    """None means all dims; an int or a sequence of ints; result is sorted. A dim given
    twice (``x.sum((0, 0))``, ``(0, -2)`` on a matrix) raises, as in PyTorch."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (int, np.integer)) or getattr(dims, "ndim", None) == 0:   # (a 0-d tensor: one dim)
        dims = (dims,)
    normed = [normalize_dim(d, ndim, op) for d in dims]
    out = sorted(set(normed))
    if len(out) != len(normed):
        rep = next(d for d in normed if normed.count(d) > 1)
        raise ShapeError(f"{op}: dim {rep} appears multiple times in the list of dims {tuple(dims)!r}")
    return () if ndim == 0 else tuple(out)


def eager_int_0d(v) -> bool:
    """Whether `v` is an eager 0-d integer tensor, which PyTorch takes as the int it holds
    (a traced one is not: its value is unknown while capturing)."""
    return getattr(v, "_data", None) is not None and v.ndim == 0 and v.dtype.is_integer
