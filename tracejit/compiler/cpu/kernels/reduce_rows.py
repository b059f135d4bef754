"""The CPU kernels of sum, amax and amin over a tensor's last dims, rendered as rows groups.

numpy reduces along a contiguous last axis one row at a time, paying ~0.1 us a row before
any work: float32 sums over the last dim of (16384, 3) and (4096, 64) run 2-5x slower than
here, maxima 3-6x. Here such a reduction is the rows group of that reduction alone
(``fusion.partition(lone_rows=True)``), lowered and rendered by the CPU backend as a
compiled program's rows group is: a row folded in SIMD lanes (sums in float32 within a
block of 256, float64 across blocks; maxima on integer keys, nan-propagating), rows split
over the threads where the work pays for them. Eager calls and a compiled program's lone
reductions (steps that run the primitive) both take it.

A kernel is made per primitive, dtype and variant; the row count and length are
arguments. The operand is the C-contiguous input viewed as (rows, row length); anything
else (a reduction over other dims, a strided input, integers, fewer than `ROWS_MIN` rows,
a row of one value or of more than `ROW_MAX`) declines and numpy's form runs. Loaded with loader.py's policy
(calls decline while the kernel compiles in the background; under TRACEJIT_COMPILE=sync
only a kernel already on disk is loaded, none compiled in the call).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from ....ops.reductions import AMAX, AMIN, SUM
from .loader import entry, kernel as _kernel, lowered, one_group

__all__ = ["reduce_last", "takes", "specialize", "ROW_MAX", "ROWS_MIN"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Rows longer than this are left to numpy, whose per-row cost no longer dominates there:
# (1024, 512) float32 sums ran at 0.9x numpy's time and maxima at 1.2x, (2048, 256) at 0.5x
ROW_MAX = 256
# Fewer rows than this cost numpy less than the kernel's call (~2 us either way)
ROWS_MIN = 32
_forms: dict = {}    # (prim name, dtype name) -> nest, or unsupported
_loaded: dict = {}   # (prim name, dtype name, parallel) -> the loaded kernel's entry


def _rows(shape: tuple, dims: tuple) -> Optional[tuple]:
    """(rows, row length) of reducing `shape` over `dims` where `dims` are its last dims and
    some dim stays, else None."""
    nd = len(shape)
    k = len(dims)
    if not 0 < k < nd or tuple(sorted(dims)) != tuple(range(nd - k, nd)):
        return None
    n = math.prod(shape[nd - k:])
    m = math.prod(shape[:nd - k])
    if n < 2 or m < ROWS_MIN or n > ROW_MAX:
        return None
    return m, n


def takes(x, dims, keepdim) -> bool:
    """Whether `reduce_last` may take the call (the implementation table's checker)."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.flags.c_contiguous
            and _rows(x.shape, tuple(dims)) is not None)


def _lower(prim, dtype: str):
    from ... import loopnest
    reduce = {SUM: lambda x: x.sum(-1, keepdim=True), AMAX: lambda x: x.amax(-1, keepdim=True),
              AMIN: lambda x: x.amin(-1, keepdim=True)}[prim]
    graph, group = one_group(reduce, [((2, 2), dtype)], f"{prim.name} over the last dim", lone_rows=True)
    if len(group.rows) != 1 or group.eqns or group.cols:
        raise ValueError(f"{prim.name} over the last dim is not a rows group of the reduction alone")
    return loopnest.lower(group, loopnest.operand_layouts(group), "kernel")


def _entry(prim, dt: np.dtype, elements: int) -> Optional[Callable]:
    """The loaded kernel's entry for `prim` on `dt` rows of `elements` in all, or None
    (no such group, or still compiling)."""
    from ...codegen_cpu_rows import runs_parallel
    nest = lowered(_forms, (prim.name, dt.name), lambda: _lower(prim, dt.name))
    if nest is None:
        return None
    parallel = runs_parallel(nest, elements)
    key = (prim.name, dt.name, parallel)

    def get():
        from ... import backends
        # (sync_compiles False: in sync mode only a kernel on disk loads; eager compiles
        # nothing on the caller's time, as the elementwise kernels)
        return _kernel(("reduce_rows",) + key, lambda: backends.get("cpu").render(nest, parallel),
                       sync_compiles=False).get()
    return entry(_loaded, key, get, serial=not parallel)


def reduce_last(prim) -> Callable:
    """`prim`'s implementation: ``fn(x, dims, keepdim)`` -> the reduction by the rows kernel,
    or None (declined: `takes` says no, or the kernel is not loaded yet)."""
    def fn(x, dims, keepdim):
        if not takes(x, dims, keepdim):
            return None
        return _run(prim, x, tuple(dims), keepdim)
    fn.__name__ = fn.__qualname__ = f"{prim.name}_last"
    return fn


def _out_shape(shape: tuple, dims: tuple, keepdim: bool) -> tuple:
    nd = len(shape) - len(dims)
    return tuple(shape[:nd]) + (1,) * (len(dims) if keepdim else 0)


def _run(prim, x, dims: tuple, keepdim: bool):
    m, n = _rows(x.shape, dims)
    call = _entry(prim, x.dtype, x.size)
    if call is None:
        return None
    y = np.empty(_out_shape(x.shape, dims, keepdim), x.dtype)
    call(x.reshape(m, n), y.reshape(m, 1), m, n)
    return y


def specialize(prim) -> Callable:
    """`prim`'s plan call for one eager signature: the rows kernel, falling back to the numpy
    form while it loads, where the signature is one `takes` may accept; else the numpy form.
    The rows, the result's shape and, once loaded, the kernel are worked out once."""
    impl = prim.impl
    numpy_call = None if prim.extra.get("fast") is None else prim.extra["fast"]

    def call_for(shapes, dtype, params):
        dims, keepdim = tuple(params["dims"]), params["keepdim"]
        plain = (numpy_call(shapes, dtype, params) if numpy_call is not None else None) or \
            (lambda x: impl(np, x, **params))
        dt = np.dtype(dtype)
        rows = None if len(shapes) != 1 or shapes[0] is None or dt not in _DTYPES \
            else _rows(tuple(shapes[0]), dims)
        if rows is None:
            return plain
        m, n = rows
        out_shape = _out_shape(tuple(shapes[0]), dims, keepdim)
        kern = None

        def call(x):
            nonlocal kern
            if not x.flags.c_contiguous:
                return plain(x)
            if kern is None:
                kern = _entry(prim, dt, m * n)
                if kern is None:
                    return plain(x)
            y = np.empty(out_shape, dt)
            kern(x.reshape(m, n), y.reshape(m, 1), m, n)
            return y
        return call
    return call_for
