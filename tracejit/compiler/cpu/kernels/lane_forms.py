"""Softmax-like primitives over a dim other than the last, by their rows forms in lanes.

Why: over dim 1 of (32, 64, 128) the numpy form makes a pass per step, each reduction
over a strided dim (softmax and log_softmax forward and backward: 1.2-1.5x PyTorch's
time). The primitive's rows form (row_forms.py), lowered at rank 3 for the iteration
shape (A, B, R), is rendered in lanes (compiler/codegen_cpu_lanes.py) over the arrays as
they lie, (A, R, B): for each A, the reductions over R fold across the B lanes, each
inner loop a contiguous run; no transposed copy. One definition: the same rows form as
the last-dim kernels, eager and compiled calls alike through the implementation table.
"""
from __future__ import annotations

import math

import numpy as np

from ....ops import impls
from .loader import kernel as _kernel, lowered

__all__ = ["off_last_dim", "softmax", "softmax_backward", "log_softmax", "log_softmax_backward",
           "middle_call", "run_middle"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_forms: dict = {}    # (prim name, arity, dtype, params) -> (graph input positions, nest), or unsupported


def off_last_dim(*arrays, dim, **params) -> bool:
    """The checker: a reduction over a dim before the last, operands of one shape and float
    dtype (no broadcast mask)."""
    x = arrays[0]
    return (0 <= dim < x.ndim - 1 and x.dtype in _DTYPES
            and all(a.shape == x.shape and a.dtype == x.dtype for a in arrays[1:]))


def run_middle(prim, arrays, params: dict):
    """`prim`'s result over dim ``params["dim"]`` of `arrays` (one shape, float32 or float64)
    by its rows form in lanes, or None (not such arrays, or the kernel is not loaded yet:
    the caller's numpy form runs)."""
    x = arrays[0]
    fast = (prim, tuple(params.items()), x.shape, x.dtype, len(arrays))
    call = _calls.get(fast)
    if call is None:
        if any(type(a) is not np.ndarray for a in arrays) or not off_last_dim(*arrays, **params) or x.size == 0:
            return None
        call = _prepare(prim, arrays, params)
        if call is None:
            return None
        if len(_calls) > 4096:   # (shapes that keep changing: a dynamic batch)
            _calls.clear()
        _calls[fast] = call
    elif any(a.shape != x.shape or a.dtype != x.dtype or type(a) is not np.ndarray for a in arrays[1:]):
        return None
    fn, positions, dims = call
    if fn is None:   # (trailing dims of size 1: rows of the last-dim kernels)
        from .row_forms import run
        a, r, _ = dims
        got = run(prim, tuple(v.reshape(a, r) for v in arrays), dict(params, dim=1))
        return None if got is None else got.reshape(x.shape)
    ops = [np.ascontiguousarray(arrays[k]).reshape(dims) for k in positions]
    out = np.empty(dims, x.dtype)
    fn(*ops, out, dims[0], dims[2], dims[1])
    return out.reshape(x.shape)


_calls: dict = {}   # (prim, params, shape, dtype, arity) -> (kernel, operand order, (A, R, B))


def _prepare(prim, arrays, params: dict):
    """(the loaded kernel, graph input positions, (A, R, B)) for these arrays; None while
    the kernel is not loaded or where the form does not lower."""
    from ... import backends
    from ...codegen_cpu_lanes import render_lanes
    from ...codegen_cpu_rows import runs_parallel
    from .row_forms import _lower
    x = arrays[0]
    dim = params["dim"]
    dims = (math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:]))
    if dims[2] == 1:
        return None, None, dims
    kept = dict(params, dim=2)     # (the rows form reduces its last dim, whatever `dim` says)
    key = (prim.name, len(arrays), x.dtype.name, tuple(sorted(kept.items())))
    form = lowered(_forms, key, lambda: _lower(prim, [((2, 2, 2), x.dtype.name)] * len(arrays), kept))
    if form is None:
        return None
    positions, nest = form
    parallel = runs_parallel(nest, x.size)
    fn = _kernel(("lanes",) + key + (parallel,), lambda: render_lanes(nest, parallel)).get()
    if fn is None:
        return None
    return (fn if parallel else backends.get("cpu").fast_entry(fn)), positions, dims


# ---------------------------------------------------------------- the primitives' implementations
# (registered by implementations.py behind `off_last_dim`; None: the numpy form runs)
def softmax(x, *mask, dim, scale=1.0):
    from ....ops.softmax_prim import SOFTMAX
    return None if mask else run_middle(SOFTMAX, (x,), {"dim": dim, "scale": scale})


def softmax_backward(g, y, dim, scale=1.0):
    from ....ops.softmax_prim import SOFTMAX_BACKWARD
    return run_middle(SOFTMAX_BACKWARD, (g, y), {"dim": dim, "scale": scale})


def log_softmax(x, *, dim):
    from ....ops.log_softmax_prim import LOG_SOFTMAX
    return run_middle(LOG_SOFTMAX, (x,), {"dim": dim})


def log_softmax_backward(g, y, *, dim):
    from ....ops.log_softmax_prim import LOG_SOFTMAX_BACKWARD
    return run_middle(LOG_SOFTMAX_BACKWARD, (g, y), {"dim": dim})


def middle_call(prim, params: dict, scaled: bool):
    """An eager plan's call for one signature of `prim` over a dim before the last: the
    lanes kernel, falling back to the numpy form while it is not loaded."""
    numpy_form = impls.numpy_form(prim, params)
    kept = {"dim": params["dim"], "scale": params.get("scale", 1.0)} if scaled else dict(params)

    def call(*arrays):
        got = run_middle(prim, arrays, kept)
        return numpy_form(*arrays) if got is None else got
    return call
