"""The CPU kernels of the pooling primitives, rendered by the windows-group renderer.

A pooling primitive traced alone is a windows group with no other work (windows.py): it is
scheduled, lowered and rendered by the CPU backend as a compiled program's windows group
is, so eager and compiled run one lowering, with the numpy forms' results bit for bit.
Loaded with loader.py's policy; one kernel per primitive, dtype, geometry and variant
(parallel from `PARALLEL_MIN` input elements). A channel-major operand is passed as its
C-contiguous (C, N, ...) view (the kernels are symmetric in the first two dims).
"""
from __future__ import annotations

import numpy as np

from .... import bf16 as _bf16
from ....ops.pool_offsets import MAX_POOL2D_SCATTER, MAX_POOL2D_WITH_OFFSETS
from ....ops.pooling_prim import AVG_POOL2D, AVG_POOL2D_BACKWARD, MAX_POOL2D
from .loader import lowered, one_group, rendered

__all__ = ["max_pool2d", "forward_offsets", "scatter", "avg_pool2d",
           "avg_pool2d_backward", "channel_major", "PARALLEL_MIN"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_forms: dict = {}    # (prim, dtype, geometry, size-1 pattern) -> nest, or unsupported
_calls: dict = {}    # the same plus the variant -> the loaded kernel
# Input elements from which the parallel variant runs: its shares cost a launch on the
# runtime's threads (a few us), a plane of LeNet's first pool (26x26) about 1 us serially.
PARALLEL_MIN = 1 << 16


def channel_major(x) -> bool:
    """Is x's memory (C, N, ...) order (an eager conv/BatchNorm activation)?"""
    return not x.flags.c_contiguous and x.swapaxes(0, 1).flags.c_contiguous


def _geometry(params) -> tuple:
    return tuple(tuple(params[k]) for k in ("kernel", "stride", "padding", "dilation"))


def _lower(prim, shapes, params):
    """`prim` over operands of these (shape, dtype) traced alone, scheduled and lowered:
    the windows nest. Raises where that is no one windows group. On bf16 words the
    primitive computes on their float32 values and its result is rounded once."""
    from ....ops.eager import bind
    from .... import dtypes
    from ... import loopnest

    def traced(*xs):
        if xs[0].dtype is not dtypes.bfloat16:
            return bind(prim, *xs, **params)
        return bind(prim, *[x.float() for x in xs], **params).to(dtypes.bfloat16)
    # (a gather reads bf16 words widened on load, and its result joins the rounding after
    # it: windows._gather_words; a fold stores rounded: windows._round_on_store)
    graph, group = one_group(traced, shapes, prim.name, windows="all")
    if group.window is None:
        raise ValueError(f"{prim.name} is not one windows group")
    if list(group.inputs) != list(graph.inputs)[:len(group.inputs)]:
        raise ValueError(f"{prim.name}'s windows group reads its operands out of order")
    return loopnest.lower(group, loopnest.operand_layouts(group))


def _fn(prim, arrays, params, shape: tuple):
    """The loaded kernel of `prim` over these C-contiguous arrays and the iteration
    `shape` (a forward's input's, a gather's output's), or None (other dtypes, a
    geometry no windows group takes, or not loaded yet)."""
    dt = arrays[0].dtype
    size = int(np.prod(shape))
    if (dt not in _DTYPES and not (dt == _bf16.STORAGE and prim in _FOLDS)) or any(a.dtype != dt for a in arrays) \
            or not size:
        return None
    geo = _geometry(params)
    # (a gather's input_shape is its iteration shape: the sizes' arguments, not the source)
    # and the operands' layouts follow from their shapes against it
    key = (prim.name, dt.name, geo, tuple(d == 1 for d in shape),
           tuple((a.shape == shape, tuple(d == 1 for d in a.shape)) for a in arrays))
    parallel = size >= PARALLEL_MIN
    fn = _calls.get(key + (parallel,))
    if fn is not None:
        return fn
    name = "bfloat16" if dt == _bf16.STORAGE else dt.name
    nest = lowered(_forms, key, lambda: _lower(prim, [(a.shape, name) for a in arrays], params))
    fn = None if nest is None else rendered(("windows",) + key + (parallel,), nest, parallel, steady=True)
    if fn is not None:
        _calls[key + (parallel,)] = fn
    return fn


def _pooled(shape, params) -> tuple:
    from ....ops.pooling_prim import _out_hw
    return tuple(shape[:2]) + _out_hw(shape[2], shape[3], params["kernel"], params["stride"],
                                      params["padding"], params["dilation"])


def _fold(prim, x, params, record: bool):
    """A forward's result over x (in x's memory order when channel-major), or None."""
    if type(x) is not np.ndarray or x.ndim != 4:
        return None
    swap = channel_major(x)
    xk = x.swapaxes(0, 1) if swap else np.ascontiguousarray(x)
    fn = _fn(prim, (xk,), params, xk.shape)
    if fn is None:
        return None
    out = np.empty(((2,) if record else ()) + _pooled(xk.shape, params), x.dtype)
    fn(xk, out, *xk.shape)
    if not swap:
        return out
    return out.swapaxes(1, 2) if record else out.swapaxes(0, 1)


# ---------------------------------------------------------------- the primitives' implementations
# (registered by implementations.py: arrays and params in, the result out, or None while
# the kernel is not loaded and the numpy form runs)
def _params(kernel, stride, padding, dilation) -> dict:
    return {"kernel": tuple(kernel), "stride": tuple(stride), "padding": tuple(padding),
            "dilation": tuple(dilation)}


def max_pool2d(x, kernel, stride, padding, dilation):
    return _fold(MAX_POOL2D, x, _params(kernel, stride, padding, dilation), False)


def forward_offsets(x, kernel, stride, padding, dilation):
    return _fold(MAX_POOL2D_WITH_OFFSETS, x, _params(kernel, stride, padding, dilation), True)


def avg_pool2d(x, kernel, stride, padding, dilation):
    return _fold(AVG_POOL2D, x, _params(kernel, stride, padding, dilation), False)


def scatter(g, rec, input_shape, kernel, stride, padding, dilation):
    """max_pool2d_scatter; the input gradient is channel-major when the record is."""
    if type(g) is not np.ndarray or type(rec) is not np.ndarray or g.ndim != 4:
        return None
    swap = not rec.flags.c_contiguous and rec.swapaxes(1, 2).flags.c_contiguous
    reck = rec.swapaxes(1, 2) if swap else np.ascontiguousarray(rec)
    gk = np.ascontiguousarray(g.swapaxes(0, 1) if swap else g)
    return _gradient(MAX_POOL2D_SCATTER, (gk, reck), swap, input_shape, kernel, stride, padding, dilation)


def avg_pool2d_backward(g, input_shape, kernel, stride, padding, dilation):
    if type(g) is not np.ndarray or g.ndim != 4:
        return None
    swap = channel_major(g)
    gk = g.swapaxes(0, 1) if swap else np.ascontiguousarray(g)
    return _gradient(AVG_POOL2D_BACKWARD, (gk,), swap, input_shape, kernel, stride, padding, dilation)


def _gradient(prim, ops, swap: bool, input_shape, kernel, stride, padding, dilation):
    """A backward's input gradient from its operands `ops` (channel-major where `swap`), or None."""
    shape = tuple(input_shape)
    if swap:
        shape = (shape[1], shape[0]) + shape[2:]
    params = dict(_params(kernel, stride, padding, dilation), input_shape=shape)
    fn = _fn(prim, ops, params, shape)
    if fn is None:
        return None
    gx = np.empty(shape, ops[0].dtype)
    fn(*ops, gx, *shape)
    return gx.swapaxes(0, 1) if swap else gx


# All take bf16 words (ops/bf16_eager.py): one pass, the float32 op's result rounded once
# (a maximum and its offset are bf16 values already; averages and added gradients are rounded).
_FOLDS = (MAX_POOL2D, MAX_POOL2D_WITH_OFFSETS, AVG_POOL2D, MAX_POOL2D_SCATTER, AVG_POOL2D_BACKWARD)
for _f in (max_pool2d, forward_offsets, avg_pool2d, scatter, avg_pool2d_backward):
    _f.bf16_widens = True
