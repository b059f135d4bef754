"""The CPU kernels of row adds by index, rendered by the scatter-group renderer.

An ``index_add`` of whole rows by one integer index array on the first dim (an embedding's
backward) traced alone is a scatter group (compiler/scatters.py): it is scheduled, lowered
and rendered as a compiled program's scatter group is, so eager and compiled run one
lowering. The updates are added in order, as np.add.at does, so the result is bitwise the
numpy form's (its rounds of distinct rows: ~1.8-2 ms a step for an LSTM LM). embedding_bag
sums its bags' rows with the same kernel. Loaded with loader.py's policy; one kernel per
dtype, ranks, update layout and variant (parallel from `PARALLEL_MIN` updated elements).
"""
from __future__ import annotations

import math

import numpy as np

from .loader import lowered, one_group, rendered, takes
from ...scatters import INDEX_DTYPES, whole_rows

__all__ = ["index_add", "scatter_add", "embedding_bag", "embedding_bag_backward", "sums_bags", "PARALLEL_MIN"]

_forms: dict = {}    # (dtype, index dtype, ranks, size-1 pattern, layout) -> nest, or unsupported
_calls: dict = {}    # the same plus the variant -> the loaded kernel
# Updated elements from which the parallel variant runs (its shares cost a launch).
PARALLEL_MIN = 1 << 16
# Updates below which np.add.at runs as it is (cheaper than the checks).
_FEW = 32
# numpy's ``dtype.name`` is a Python property (~1.5 us); a scatter_add asked it ~4 times a call
_NAMES: dict = {}


def _name(dt) -> str:
    name = _NAMES.get(dt)
    if name is None:
        name = _NAMES[dt] = dt.name
    return name


def _lower(shapes, layouts, order):
    from dataclasses import replace
    from ....ops.eager import bind
    from ....ops.indexing import INDEX_ADD
    from ... import loopnest
    graph, group = one_group(lambda a, v, idx: bind(INDEX_ADD, a, v, idx, spec=(("t", 0),)), shapes, "index_add")
    if group.scatter is None or list(group.inputs) != list(graph.inputs):
        raise ValueError("index_add is not one scatter group reading its operands in order")
    nest = loopnest.lower(group, layouts)
    if order is None:
        return nest
    ops = list(nest.operands)
    ops[1] = replace(ops[1], index=order)    # (read as its C-ordered root's dims `order`)
    return replace(nest, operands=tuple(ops))


def _root_order(v: np.ndarray):
    """The dims of `v` in the order of its C-contiguous root's (a transposed view of it, the
    last dim kept last: an LM's embedding gradient), or None."""
    if v.ndim < 3 or min(v.strides) <= 0:
        return None
    order = tuple(sorted(range(v.ndim), key=lambda d: -v.strides[d]))
    return order if order[-1] == v.ndim - 1 and v.transpose(order).flags.c_contiguous else None


def add_rows(base: np.ndarray, v: np.ndarray, idx: np.ndarray, out: np.ndarray):
    """``out = base`` with ``out[idx[i...]] += v[i...]`` added in order (out may be base),
    or None while the kernel is not loaded; an index out of range raises IndexError first."""
    order = None if v.flags.c_contiguous else _root_order(v)
    layout = "flat" if order is None else order
    vshape = v.shape
    if order is None:   # (strided rows copied first: read in place they keep the add scalar, 3x slower)
        v = np.ascontiguousarray(v)
    else:               # (a transposed view's C-ordered root read in place, rows unit-stride)
        v = v.transpose(order)
    key = (_name(base.dtype), _name(idx.dtype), base.ndim, idx.ndim,
           tuple(d == 1 for d in vshape), layout)
    parallel = v.size >= PARALLEL_MIN
    fn = _calls.get(key + (parallel,))
    if fn is None:
        shapes = [(base.shape, base.dtype.name), (vshape, v.dtype.name), (idx.shape, idx.dtype.name)]
        nest = lowered(_forms, key, lambda: _lower(shapes, ("ndc", "flat" if order is None else "ndc", "ndc"), order))
        fn = None if nest is None else rendered(("scatter",) + key + (parallel,), nest, parallel, steady=True)
        if fn is None:
            return None
        _calls[key + (parallel,)] = fn
    fn(base, v, idx, out, *vshape)
    return out


def index_add(a, v, *idx, spec, nonneg=False):
    """INDEX_ADD's CPU implementation (compiler/cpu/implementations.py) for whole rows added
    by one integer index array on the first dim of a float array; None (the numpy form runs,
    raising its own error for an index out of range) for any other add."""
    from ....ops.donation import donated
    if (len(idx) != 1 or not whole_rows(spec) or not takes(np, a, v)
            or type(idx[0]) is not np.ndarray or _name(idx[0].dtype) not in INDEX_DTYPES
            or idx[0].size < _FEW or not a.ndim or v.shape != idx[0].shape + a.shape[1:]
            or not a.flags.c_contiguous):
        return None
    if nonneg:
        from ....ops.gather_prim import check_index_range
        check_index_range("scatter_add", idx[0], 0, a.shape[0])
    out = a if donated(a) else np.empty_like(a)   # (the kernel copies `a` in)
    try:
        return add_rows(a, v, np.ascontiguousarray(idx[0]), out)
    except IndexError:
        return None


def scatter_add(a, index, src, *, dim):
    """SCATTER_ADD's CPU implementation where the index repeats one vector along the other
    dims of float rows (dim 0: a GNN's ``index.view(-1, 1).expand_as(src)``): those rows
    added whole (~5x faster for 10556 edges into 2708 64-wide rows); likewise for a
    later dim whose index is expanded over the dims after it (a batched row scatter, as
    mixture-of-depths' ``x.scatter_add(1, idx[..., None].expand(-1, -1, C), y)``), the
    rows numbered in `a` seen as (rows, inner); None (the numpy form: its flat np.add.at
    beats a loop over one-element rows) for any other index."""
    from ....ops.gather_prim import _row_index, _trailing_rows, check_index_range
    if (not takes(np, a, src) or type(index) is not np.ndarray or index.size < _FEW
            or a.size <= a.shape[0] or not a.flags.c_contiguous):
        return None
    if dim:
        rows = (_trailing_rows(index, dim, a.shape)
                if src.shape == index.shape and _name(index.dtype) in INDEX_DTYPES else None)
        if rows is None:
            return None
        check_index_range("scatter_add", index[(Ellipsis,) + (0,) * (index.ndim - dim - 1)], dim, a.shape[dim])
        a2 = a.reshape(-1, math.prod(a.shape[dim + 1:]))
        out = add_rows(a2, src.reshape(-1, a2.shape[1]), np.ascontiguousarray(rows), np.empty_like(a2))
        return None if out is None else out.reshape(a.shape)
    if index.shape[1:] != a.shape[1:]:
        return None
    rows = _row_index(index, 0, a.shape)
    if rows is None or _name(rows.dtype) not in INDEX_DTYPES:
        return None
    rows = np.ascontiguousarray(rows)
    check_index_range("scatter_add", rows, 0, a.shape[0])   # (negative rows too: index_add wraps them)
    return add_rows(a, src, rows, np.empty_like(a))


def _bagged(form):
    """EMBEDDING_BAG's or EMBEDDING_BAG_BACKWARD's CPU implementation: its numpy form
    (ops/embedding_bag.py `bag_forward`, `bag_backward`) with sums added by the scatter
    kernel (numpy's reduceat: ~55 us for 512 bags of 16-wide rows), np.add.at while it loads."""
    def call(*arrays, **params):
        from ....ops import embedding_bag as forms

        def add_bag_rows(out, idx, rows):
            got = add_rows(out, rows, np.ascontiguousarray(idx), out) if idx.size else out
            return forms.add_rows_np(out, idx, rows) if got is None else got
        return getattr(forms, form)(*arrays, add=add_bag_rows, **params)
    call.__name__ = form
    return call


embedding_bag, embedding_bag_backward = _bagged("bag_forward"), _bagged("bag_backward")


def sums_bags(*arrays, mode, **params) -> bool:
    """The embedding_bag calls the loop adds: rows (the weight's, or the gradient's) of a
    kernel's dtype summed, not maxima."""
    return mode != "max" and takes(np, arrays[0])
