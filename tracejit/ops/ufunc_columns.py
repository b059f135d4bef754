"""A plan's ufunc call for results with many short rows, run a column at a time.

numpy runs a ufunc's inner loop along the last dim when that is every operand's densest
one, and pays ~10 ns per row around it: where the operands are strided or broadcast
(``e[:, 0] * w[:, 0:1]``, a (4096, 2) slice of (4096, 8, 2) by a column of (4096, 3)) the
dims cannot be coalesced, and float32 rows of 2 ran 4x slower than PyTorch. One ufunc
call per column (`columns`) loops along the rows instead, straight into the column of a
C-contiguous result: the same ufunc on the same values, element by element, so the
values are bit for bit numpy's. Calls whose operands are all C-contiguous arrays of the
result's shape, or numbers, coalesce already and take the ufunc as they are. A sum over
the first dim of few columns (`columns_sum`) reduces each column as a strided run.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

__all__ = ["columns", "COLUMNS_MAX", "ROWS_MIN", "columns_sum", "takes_columns"]

# Widest last dim taken: (4096, k) float32 products ran 4.3x (k=2) to 2.1x (k=4) faster a
# column at a time, even at k=8 (the column calls' cost grows with k, numpy's does not)
COLUMNS_MAX = 4
# Fewest rows (the result's size over its last dim) taken: from 1024 rows of 2 to 4 the
# column calls cost 1.6-2.7x less, at 512 about the same
ROWS_MIN = 1024


def columns(u, shapes: tuple) -> Optional[Callable]:
    """The plan call of ufunc `u` for operands of `shapes` (None: a number), a column at a
    time where the result's rows are many and short (see the module docstring); None
    where the plain ufunc call is the call."""
    if not isinstance(u, np.ufunc) or u.nout != 1 or u.nin not in (1, 2) or len(shapes) != u.nin:
        return None
    dims = [s for s in shapes if s is not None]
    if not dims:
        return None
    if any(len(s) > 32 for s in dims):   # (numpy's broadcast takes at most 32 dims)
        return None
    try:
        out_shape = np.broadcast_shapes(*dims)
    except ValueError:
        return None
    if len(out_shape) < 2 or not 2 <= out_shape[-1] <= COLUMNS_MAX or math.prod(out_shape[:-1]) < ROWS_MIN:
        return None
    k = out_shape[-1]
    out_dtype = []   # the result's dtype, resolved at the first call that runs by columns

    def call(*ops):
        for a in ops:
            if type(a) is np.ndarray and not (a.shape == out_shape and a.flags.c_contiguous):
                break
        else:
            return u(*ops)   # (dense, none broadcast: numpy coalesces the dims)
        if not out_dtype:
            try:
                out_dtype.append(u.resolve_dtypes(tuple(
                    a.dtype if isinstance(a, (np.ndarray, np.generic)) else type(a) for a in ops) + (None,))[-1])
            except (TypeError, ValueError):   # (an operand numpy resolves only by value)
                out_dtype.append(None)
        dt = out_dtype[0]
        if dt is None:
            return u(*ops)
        out = np.empty(out_shape, dt)
        args = []   # (operand, whether it is read a column at a time)
        for a in ops:
            if type(a) is np.ndarray and a.ndim:
                args.append((a, True) if a.shape[-1] != 1 else (a[..., 0], False))
            else:
                args.append((a, False))
        if u.nin == 2:
            (x, sx), (y, sy) = args
            for j in range(k):
                u(x[..., j] if sx else x, y[..., j] if sy else y, out=out[..., j])
        else:
            x = ops[0]
            for j in range(k):
                u(x[..., j], out=out[..., j])
        return out
    call.__name__ = call.__qualname__ = f"{u.__name__}_columns"
    return call


# A sum over the first dim of few columns (a narrow head's bias gradient): numpy's reduce
# walks it row by row, ~15 ns a row of 2 ((4096, 2): 62 us, PyTorch 5.5); each column
# reduced as a strided run takes ~3 us
SUM_COLUMNS_MAX, SUM_ROWS_MIN = 8, 256


def columns_sum(shape, keepdim: bool, dtype) -> Optional[Callable]:
    """The plan call of a sum over dim 0 of an array of `shape` where it has few columns
    (`takes_columns`), else None: a C-contiguous array's columns are each reduced as a
    strided run (numpy's pairwise sum); any other layout takes numpy's reduce."""
    if not takes_columns(shape):
        return None
    k = math.prod(shape[1:])
    out_shape = ((1,) if keepdim else ()) + tuple(shape[1:])

    def columns_sum(x, _reduce=np.add.reduce):
        if not x.flags.c_contiguous:
            return _reduce(x, axis=0, keepdims=keepdim)
        flat, out = x.reshape(-1), np.empty(out_shape, dtype)
        o = out.reshape(-1)
        for j in range(k):
            o[j] = _reduce(flat[j::k])
        return out
    return columns_sum


def takes_columns(shape) -> bool:
    """Whether a sum over dim 0 of an array of `shape` runs as `columns_sum`."""
    return len(shape) >= 2 and shape[0] >= SUM_ROWS_MIN and math.prod(shape[1:]) <= SUM_COLUMNS_MAX
