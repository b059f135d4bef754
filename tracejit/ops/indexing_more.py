"""Indexing composites with PyTorch's signatures: scatter (with ``reduce``),
scatter_reduce, index_add / index_copy / index_fill, masked_fill / masked_select /
masked_scatter, take, put, select, argwhere.

All of them are written with `index_put`, `getitem`, `gather` and `scatter_add`, so their
gradients are those ops' VJPs. ``scatter`` and ``index_copy`` write through
``index_put`` with one coordinate array per dim (PyTorch's "last write wins" for
repeated indices; the gradient of the written values is the output gradient gathered
back, as PyTorch's is).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import ArgumentError, DTypeError, IndexRangeError, ShapeError, expect_same_dtype
from ..shapes import normalize_dim
from ..tensor import Tensor
from .creation import arange, full, tensor, zeros
from .elementwise import cast, where
from .gather_prim import _flat_positions, _row_index, check_index_range, check_index_within, on_one_element, src_prefix
from .indexing import gather, getitem, in_range, index_add_, index_put, nonzero, scatter_add
from .shape import expand, reshape
from .rearrange import movedim
from .reductions import cumsum, prod
from .registry import Aval, bind, defprim, refuse_tracing, trace_state

__all__ = ["scatter", "scatter_reduce", "index_add", "index_copy", "index_fill", "index_reduce",
           "masked_fill", "masked_select", "masked_scatter", "take", "put", "select", "argwhere"]


def _grids(shape, dim: int, index, device):
    """Coordinate tensors addressing `index`'s positions, with `index` itself along `dim`."""
    coords = []
    for d, n in enumerate(shape):
        if d == dim:
            coords.append(index)
        else:
            view = [1] * len(shape)
            view[d] = n
            coords.append(reshape(arange(n, device=device), tuple(view)))
    return tuple(coords)


def _src_like(src, index, a, op="scatter"):
    if isinstance(src, Tensor):
        expect_same_dtype(op, a, src, "src")
        src = src_prefix(op, src, index)
        return cast(src, a.dtype) if src.dtype is not a.dtype else src
    return full(tuple(index.shape), src, dtype=a.dtype, device=a.device)


def _check_index(op, a, index, dim):
    if not isinstance(index, Tensor) or not index.dtype.is_integer:
        raise DTypeError(f"{op}: index must be an integer tensor, got "
                         f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")
    if index.ndim != a.ndim and not (index.ndim == 0 and a.ndim == 0):
        raise ShapeError(f"{op}: index rank {index.ndim} must equal self rank {a.ndim}")
    check_index_within(op, index, a, dim)


def scatter(input, dim: int, index, src=None, *, value=None, reduce=None):
    """``out[index[i][j]][j] = src[i][j]`` along `dim` (``reduce='add'/'multiply'`` combine)."""
    if input.ndim == 0:
        return on_one_element(scatter, "scatter", input, dim, index, src, value=value, reduce=reduce)
    dim = normalize_dim(dim, input.ndim, "scatter")
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter: expected src or value")
    _check_index("scatter", input, index, dim)
    index = in_range(index, input.shape[dim], "scatter")   # (index_put would wrap a negative one)
    s = _src_like(src, index, input)
    if reduce is None:
        return index_put(input, _grids(tuple(index.shape), dim, index, input.device), s)
    if reduce == "add":
        return scatter_add(input, dim, index, s)
    if reduce == "multiply":
        return scatter_reduce(input, dim, index, s, "prod")
    raise ValueError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")


def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """Combine `src` into `input` at `index` along `dim` by sum, prod, mean, amax or amin."""
    if input.ndim == 0:
        return on_one_element(scatter_reduce, "scatter_reduce", input, dim, index, src, reduce, include_self=include_self)
    dim = normalize_dim(dim, input.ndim, "scatter_reduce")
    _check_index("scatter_reduce", input, index, dim)
    s = _src_like(src, index, input, "scatter_reduce")
    if reduce in ("sum", "mean"):
        if reduce == "sum" and include_self:
            return scatter_add(input, dim, index, s)
        zero = zeros(tuple(input.shape), dtype=input.dtype, device=input.device)
        total = scatter_add(input if include_self else zero, dim, index, s)
        # the targets' counts (rather than zeroing the targets by an index_put of every
        # element's grid position: 3x the time of a scatter_add)
        hit = scatter_add(zero, dim, index, full(tuple(s.shape), 1, dtype=input.dtype, device=input.device))
        hit_any = hit > 0
        if reduce == "sum":
            return where(hit_any, total, input)
        # (without self a target's count is its hits: no add, and one comparison serves both)
        count = hit + 1 if include_self else hit
        counted = count > 0 if include_self else hit_any
        out = total / where(counted, count, 1)
        if input.dtype.is_integer:
            from .elementwise import floor
            out = cast(floor(out), input.dtype)
        return where(hit_any, out, input)
    if reduce in ("amax", "amin"):
        return bind(SCATTER_EXTREME, input, index, s, dim=dim, reduce=reduce,
                    include_self=bool(include_self))
    if reduce == "prod":
        # one slot per (position, contribution): gather-and-reduce over a padded stack
        return _scatter_prod(input, dim, in_range(index, input.shape[dim], "scatter_reduce"), s, include_self)
    raise ValueError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")


def _scatter_prod(input, dim, index, s, include_self):
    """Multiply contributions per target position: the contributions sorted by target, laid
    out as (targets, most contributions) with 1 as padding."""
    refuse_tracing("scatter_reduce('prod')", "its index")
    idx = np.moveaxis(index.numpy(), dim, -1)
    shape = tuple(input.shape)
    out_moved = np.moveaxis(np.empty(shape, dtype=np.int8), dim, -1).shape
    lead = idx.shape[:-1]
    m = idx.shape[-1]
    n_out = out_moved[-1]
    flat_target = (np.arange(int(np.prod(lead)))[:, None] * n_out + idx.reshape(-1, m)).reshape(-1)
    order = np.argsort(flat_target, kind="stable")
    targets = flat_target[order]
    counts = np.bincount(targets, minlength=int(np.prod(out_moved)))
    width = max(int(counts.max()) if counts.size else 0, 1)
    slot = np.arange(targets.size) - (np.cumsum(counts) - counts)[targets]
    table = full((int(np.prod(out_moved)) * width,), 1, dtype=input.dtype, device=input.device)
    src_moved = reshape(movedim(s, dim, -1), (-1,))
    picked = getitem(src_moved, tensor(order, device=input.device))
    table = index_put(table, (tensor(targets * width + slot, device=input.device),), picked)
    red = movedim(prod(reshape(table, out_moved + (width,)), -1), -1, dim)
    hit = tensor(np.moveaxis(counts.reshape(out_moved) > 0, -1, dim), device=input.device)
    return where(hit, red * input if include_self else red, input)


# ------------------------------------------------------- scatter_reduce amax / amin
def _scatter_extreme_rule(a, index, src, *, dim, reduce, include_self):
    if tuple(index.shape) != tuple(src.shape):
        raise ShapeError(f"scatter_reduce: index shape {index.shape} must equal src shape {src.shape}")
    if not index.dtype.is_integer:
        raise IndexRangeError(f"scatter_reduce: index must be an integer tensor, got {index.dtype.name}")
    if index.ndim != a.ndim:
        raise ShapeError(f"scatter_reduce: index rank {index.ndim} must equal self rank {a.ndim}")
    if any(n > a.shape[d] for d, n in enumerate(index.shape) if d != dim):
        raise ShapeError(f"scatter_reduce: index of shape {tuple(index.shape)} exceeds self of "
                         f"shape {tuple(a.shape)} in a dim other than {dim}")
    return Aval(a.shape, a.dtype, a.device)


def _scatter_extreme_impl(xp, a, index, src, *, dim, reduce, include_self):
    """One ufunc.at over the flat output (numpy's fast form of it; a per-node maximum over
    a graph's 13k edges, 8 heads: ~25x faster than sorting them into groups)."""
    check_index_range("scatter_reduce", index, dim, a.shape[dim])
    out = xp.array(a, copy=True, order="C")
    if not index.size:
        return out
    flat_out = out.reshape(-1)
    pos = _flat_positions(index, dim, a.shape).reshape(-1)
    rows = None if include_self else _row_index(index, dim, a.shape)
    if not include_self:
        # the targets start from the reduction's identity, the others keep their value
        if a.dtype.kind == "f":
            ident = -np.inf if reduce == "amax" else np.inf
        elif a.dtype.kind == "b":
            ident = reduce == "amin"
        else:
            info = np.iinfo(a.dtype)
            ident = info.min if reduce == "amax" else info.max
        if rows is not None:   # (an expanded index: whole slices along dim, 20x fewer writes at 64 wide)
            out.swapaxes(0, dim)[rows] = ident
        else:
            flat_out[pos] = ident
    if xp is np:
        (np.maximum if reduce == "amax" else np.minimum).at(flat_out, pos, src.reshape(-1))
    else:  # pragma: no cover - GPU only
        import cupyx
        (cupyx.scatter_max if reduce == "amax" else cupyx.scatter_min)(flat_out, pos, src.reshape(-1))
    return out


def _scatter_extreme_vjp(g, out, a, index, src, *, dim, reduce, include_self):
    # PyTorch's rule: the gradient of each target goes in equal parts to every element
    # (its own old value included) equal to the result
    from .elementwise import eq
    value = gather(out, dim, index)
    self_is = cast(eq(a, out), g.dtype)
    src_is = cast(eq(src, value), g.dtype)
    share = g / scatter_add(self_is, dim, index, src_is)
    g_self = self_is * share
    if not include_self:   # (none to the targets: a scatter_add's count, not a scatter's index_put of grids)
        hit = scatter_add(zeros(tuple(g.shape), dtype=g.dtype, device=g.device), dim, index,
                          full(tuple(index.shape), 1, dtype=g.dtype, device=g.device))
        g_self = where(hit > 0, 0.0, g_self)
    return g_self, None, src_is * gather(share, dim, index)


SCATTER_EXTREME = defprim("scatter_extreme", _scatter_extreme_impl, _scatter_extreme_rule,
                          _scatter_extreme_vjp, kind="index", save=lambda rq: (0, 1, 2),
                          save_out=True, nondiff=(1,), grad_name="ScatterReduceBackward0")


def _along(a, dim, index):
    """The full coordinates of a[..., index, ...] (index 1-D along dim)."""
    shape = list(a.shape)
    shape[dim] = index.shape[0]
    lined = reshape(index, (1,) * dim + (-1,) + (1,) * (a.ndim - dim - 1))
    return _grids(shape, dim, lined, a.device), tuple(shape)


def _vector_index(op, index):
    if not isinstance(index, Tensor) or not index.dtype.is_integer or index.ndim > 1:
        # (DTypeError: a TypeError, and a RuntimeError as PyTorch raises)
        raise DTypeError(f"{op}: index must be a 0-D or 1-D integer tensor, got "
                         f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__} of shape "
                         f"{tuple(getattr(index, 'shape', ()))}")
    return reshape(index, (-1,))


def index_add(input, dim: int, index, source, *, alpha=1):
    """``input[..., index[i], ...] += alpha * source[..., i, ...]`` along `dim`."""
    if input.ndim == 0:
        return on_one_element(index_add, "index_add", input, dim, index, source, alpha=alpha)
    dim = normalize_dim(dim, input.ndim, "index_add")
    index = _vector_index("index_add", index)
    shape = list(input.shape)
    shape[dim] = index.shape[0]
    expect_same_dtype("index_add", input, source)
    src = source * alpha if alpha != 1 else source
    if tuple(src.shape) != tuple(shape):
        raise ShapeError(f"index_add: source of shape {tuple(src.shape)} should be {tuple(shape)}")
    # one index along `dim` (the row add of an embedding's backward, not an add per
    # element): its gradient for the source is the rows picked back, index_select's form
    spec = (("s", None, None, None),) * dim + (("t", 0),)
    src = cast(src, input.dtype) if src.dtype is not input.dtype else src
    return index_add_(input, src, (in_range(index, input.shape[dim], "index_add"),), spec)


def index_reduce(input, dim: int, index, source, reduce: str, *, include_self: bool = True):
    """Combine slices of `source` into `input` at ``index`` along `dim` by prod, mean, amax
    or amin: scatter_reduce with the index spread over each slice."""
    if input.ndim == 0:
        return on_one_element(index_reduce, "index_reduce", input, dim, index, source, reduce, include_self=include_self)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ValueError(f"index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    dim = normalize_dim(dim, input.ndim, "index_reduce")
    index = _vector_index("index_reduce", index)
    shape = list(input.shape)
    shape[dim] = index.shape[0]
    if tuple(source.shape) != tuple(shape):
        raise ShapeError(f"index_reduce: source of shape {tuple(source.shape)} should be {tuple(shape)}")
    lined = reshape(index, (1,) * dim + (-1,) + (1,) * (input.ndim - dim - 1))
    return scatter_reduce(input, dim, expand(lined, tuple(shape)), source, reduce, include_self=include_self)


def index_copy(input, dim: int, index, source):
    if input.ndim == 0:
        return on_one_element(index_copy, "index_copy", input, dim, index, source)
    dim = normalize_dim(dim, input.ndim, "index_copy")
    index = in_range(_vector_index("index_copy", index), input.shape[dim], "index_copy")
    expect_same_dtype("index_copy", input, source)
    coords, shape = _along(input, dim, index)
    if tuple(source.shape) != shape:
        raise ShapeError(f"index_copy: source of shape {tuple(source.shape)} should be {shape}")
    return index_put(input, coords, source)


def index_fill(input, dim: int, index, value):
    if input.ndim == 0:
        return on_one_element(lambda a, d, i: index_fill(a, d, i, value), "index_fill", input, dim, index)
    dim = normalize_dim(dim, input.ndim, "index_fill")
    index = _vector_index("index_fill", index)
    if isinstance(value, Tensor):   # (read as a number, as PyTorch: checked eagerly, cast when captured)
        if value.ndim:
            raise ShapeError(f"index_fill: value must be a 0-dim tensor or a number, got {value.ndim} dims")
        cplx, number = value.dtype.is_complex, value.item() if value._data is not None else None
        value = cast(value, input.dtype)
    else:
        cplx, number = isinstance(value, complex), value
    if cplx and not input.dtype.is_complex:
        raise DTypeError(f"index_fill: a complex value cannot be converted to type {input.dtype.name}")
    if number is not None:
        number = _dt.number_as(input.dtype, number, "index_fill")
        value = value if isinstance(value, Tensor) else number
    if isinstance(value, Tensor):
        # a mask of the filled slices, so each filled element counts once in the value's
        # gradient however often `index` names its slice (PyTorch's; an index_put's counts repeats)
        n = input.shape[dim]
        hit = index_put(zeros((n,), dtype=_dt.bool_, device=input.device), (index,), True)
        return where(reshape(hit, (n,) + (1,) * (input.ndim - dim - 1)), value, input)
    return index_put(input, (slice(None),) * dim + (index,), value)


def masked_select(input, mask):
    """The elements where `mask` (broadcast with input) is True, as a 1-D tensor."""
    if mask.dtype is not _dt.bool_:
        raise DTypeError("masked_select: mask must be a bool tensor")
    from ..shapes import broadcast_shapes
    shape = tuple(broadcast_shapes("masked_select", tuple(input.shape), tuple(mask.shape)))
    return getitem(expand(input, shape), expand(mask, shape))


def masked_scatter(input, mask, source):
    """Copy `source`'s first elements, in order, into the positions where `mask` is True:
    each selected position takes the element at its rank among the selected (a cumsum of
    the mask), so the shapes do not depend on the mask and a capture keeps it a value."""
    if mask.dtype is not _dt.bool_:
        raise DTypeError("masked_scatter: mask must be a bool tensor")
    expect_same_dtype("masked_scatter", input, source)
    from ..shapes import broadcast_shapes
    shape = tuple(broadcast_shapes("masked_scatter", tuple(input.shape), tuple(mask.shape)))
    m = expand(mask, shape)
    rank = cumsum(reshape(m, (-1,)), 0, dtype=_dt.int64) - 1
    if trace_state.tracer is None and rank.numel() and source.numel() < int(rank[-1]) + 1:
        raise ArgumentError(f"masked_scatter: source has {source.numel()} elements, the mask selects "
                            f"{int(rank[-1]) + 1}")
    if source.numel() == 0:   # (a capture checks that the mask selects nothing)
        if trace_state.tracer is None:
            return expand(input, shape).clone()
        from .value_checks_prim import selects
        m = reshape(selects(reshape(m, (-1,)), (0,), (), "masked_scatter"), shape)
        return where(m, expand(input, shape), expand(input, shape))
    # (a selected rank past the source fails gather's range check, compiled too)
    vals = gather(reshape(source, (-1,)), 0, where(reshape(m, (-1,)), rank, 0))
    return where(m, reshape(vals, shape), expand(input, shape))


def take(input, index):
    """input as if 1-D, at `index` (any shape)."""
    flat = reshape(input, (-1,))
    return reshape(getitem(flat, reshape(index, (-1,))), tuple(index.shape))


def put(input, index, source, accumulate: bool = False):
    flat = reshape(input, (-1,))
    idx, src = reshape(index, (-1,)), reshape(source, (-1,))
    return reshape(index_put(flat, (idx,), src, accumulate), tuple(input.shape))


def select(input, dim: int, index: int):
    dim = normalize_dim(dim, input.ndim, "select")
    n = input.shape[dim]
    if getattr(index, "_trace", None) is None:   # (a traced int: getitem guards it, as ``x[:, i]``)
        index = int(index)
        if not -n <= index < n:
            raise IndexRangeError(f"select: index {index} out of range for dim {dim} of size {n}")
    return getitem(input, (slice(None),) * dim + (index,))


def argwhere(input):
    return nonzero(input)


def masked_fill(a, mask, value):
    if not (hasattr(mask, "dtype") and mask.dtype is _dt.bool_):
        raise DTypeError("masked_fill: mask must be a bool tensor")
    if hasattr(value, "_data"):
        if value.ndim != 0:
            raise ShapeError("masked_fill: value must be a 0-dim tensor or a number")
        if value._data is not None:   # (checked as the number it holds, as PyTorch)
            _dt.number_as(a.dtype, value.item(), "masked_fill")
        value = cast(value, a.dtype)
    else:
        value = _dt.number_as(a.dtype, value, "masked_fill")
    out = where(mask, value, a) if not isinstance(value, (int, float)) else _masked_fill_scalar(a, mask, value)
    # (row-major, as PyTorch's: `where` follows a transposed or channels_last input's layout)
    return out if trace_state.tracer is not None or out.is_contiguous() else out.contiguous()


def _masked_fill_scalar(a, mask, value):
    out = where(mask, value, a)
    if out.dtype is not a.dtype:
        out = cast(out, a.dtype)
    return out
