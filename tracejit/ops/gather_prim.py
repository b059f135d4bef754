"""Gather and scatter-add primitives (``torch.gather``, ``take_along_dim``,
``scatter_add``): the index form of a row lookup along one dim and its adjoint; and
`in_range`, the range check of indices PyTorch does not wrap."""
from __future__ import annotations

import math

import numpy as np

from ..device import module_of
from ..errors import DTypeError, IndexRangeError, ShapeError
from ..shapes import Sym, normalize_dim
from . import creation
from .distinct_add import within
from .registry import Aval, defprim, shift_dims
from .eager import bind
from .shape import reshape

def check_index_range(op: str, index, dim: int, n: int) -> None:
    """Raise naming the first of `index`'s values outside [0, n) (dim `dim` of `op`'s input)."""
    if not index.size or within(index, n):
        return
    lo = int(index.min())
    bad = lo if lo < 0 else int(index.max())
    raise IndexRangeError(f"{op}: index {bad} is out of range for dim {dim} of size {n}")


def check_index_within(op: str, index, a, dim: int) -> None:
    """Raise unless `index` is no larger than `a` in every dim but `dim` (PyTorch's bound
    for gather and scatter: those positions are read or written one for one)."""
    if any(n > a.shape[d] for d, n in enumerate(index.shape) if d != dim):
        raise ShapeError(f"{op}: index of shape {tuple(index.shape)} is larger than self of "
                         f"shape {tuple(a.shape)} in a dim other than {dim}")


def _in_range_rule(index, *, size, op):
    if not index.dtype.is_integer:
        # (a RuntimeError, as PyTorch's "Expected dtype int32 or int64 for index")
        raise DTypeError(f"{op}: indices must be an integer tensor, got {index.dtype.name}")
    return Aval(index.shape, index.dtype, index.device)


def _in_range_impl(xp, index, *, size, op):
    if index.size and not within(index, size):
        lo = int(index.min())
        raise IndexRangeError(f"{op}: index {lo if lo < 0 else int(index.max())} is out of range for size {size}")
    return index.view()


def _in_range_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_in_range_impl` with its size
    bound once per signature (a call with keyword arguments cost ~0.4 us)."""
    size, op = params["size"], params["op"]

    def in_range_checked(index):
        if index.size and not within(index, size):
            _in_range_impl(np, index, size=size, op=op)   # (raises the out-of-range error)
        return index.view()
    return in_range_checked


# The index itself, once every entry is in [0, size): the range check of ops whose indices
# PyTorch does not wrap (embedding, index_select, one_hot, nll_loss). A primitive so the
# check runs on every path, captured included (numpy would read row -1 as the last).
IN_RANGE = defprim("in_range", _in_range_impl, _in_range_rule, lambda g, out, index, **kw: (None,),
                   kind="index", nondiff=(0,), extra={"view": True, "fast": _in_range_fast})


def in_range(index, size: int, op: str):
    """`index` (an integer tensor), checked to lie in [0, size) on every path: an
    IndexError naming `op` and the offending index otherwise. A symbolic `size` (a dynamic
    dim's) stays symbolic: the check reads its value in each call."""
    return bind(IN_RANGE, index, size=size if isinstance(size, Sym) else int(size), op=op)


def _gather_rule(a, index, dim):
    if index.ndim != a.ndim:
        raise ShapeError(f"gather: index rank {index.ndim} must equal input rank {a.ndim} "
                         f"(input {a.shape}, index {index.shape})")
    if not index.dtype.is_integer:
        raise IndexRangeError(f"gather: index must be an integer tensor, got {index.dtype.name}")
    check_index_within("gather", index, a, dim)
    return Aval(index.shape, a.dtype, a.device)


def _gather_impl(xp, a, index, dim):
    check_index_range("gather", index, dim, a.shape[dim])
    if xp is np:
        rows = _row_index(index, dim, a.shape)
        if rows is not None:   # the index repeats one vector across the other dims
            return a.take(rows, axis=dim)   # (the method: np.take's wrapper costs as much)
        rows = _trailing_rows(index, dim, a.shape)
        if rows is not None:
            inner = math.prod(a.shape[dim + 1:])
            return np.ascontiguousarray(a).reshape(-1, inner)[rows].reshape(index.shape)
        k = _shared_lead(index, dim, a.shape)
        if k:   # one index for every leading position: its positions once, taken per position
            pos = _flat_positions(index[(0,) * k], dim - k, a.shape[k:]).reshape(-1)
            lead = math.prod(a.shape[:k])
            return np.ascontiguousarray(a).reshape(lead, -1).take(pos, axis=1).reshape(index.shape)
        if index.size and _fits(index.shape, dim, a.shape):
            return np.ascontiguousarray(a).reshape(-1)[_flat_positions(index, dim, a.shape)]
    if index.shape != a.shape:
        # take_along_axis broadcasts; torch.gather reads a prefix of the other dims.
        a = a[tuple(slice(0, s) if i != dim else slice(None) for i, s in enumerate(index.shape))]
    return xp.take_along_axis(a, index, axis=dim)


def _row_index(index, dim: int, shape: tuple):
    """The 1-D index `index` repeats along every other dim (an expanded vector: zero strides
    there, and the full extent of `shape`), or None. Then gather takes rows along `dim`
    (``np.take``), 3-6x faster than addressing every element."""
    if index.ndim == 0 or index.size == 0:   # (an empty array's strides say nothing)
        return None
    dim %= index.ndim
    st = index.strides
    for d, n in enumerate(index.shape):
        if d != dim and (n != shape[d] or (st[d] != 0 and n != 1)):
            return None
    return index[tuple(slice(None) if d == dim else 0 for d in range(index.ndim))]


def _trailing_rows(index, dim: int, shape: tuple):
    """Where `index` is expanded over every dim after `dim` (zero strides, the full extents of
    `shape`) and spans `shape` before it (``x.gather(1, idx[..., None].expand(-1, -1, C))``,
    a batched row lookup), the flat row numbers it picks in `shape` seen as (rows, inner),
    else None: gather then copies whole rows, 2x faster than addressing each element for
    rows of 16 floats."""
    nd = index.ndim
    if dim >= nd - 1 or index.strides[-1] or not index.size \
            or any(index.strides[d] or index.shape[d] != shape[d] for d in range(dim + 1, nd - 1)) \
            or any(index.shape[d] != shape[d] for d in range(dim)) or index.shape[-1] != shape[-1]:
        return None
    lead = index[(Ellipsis,) + (0,) * (nd - dim - 1)].astype(np.int64, copy=False)  # (..., N)
    outer = math.prod(shape[:dim])
    base = np.arange(outer, dtype=np.int64).reshape(lead.shape[:-1] + (1,)) * shape[dim]
    return (lead + base).reshape(-1)


def _shared_lead(index, dim: int, shape: tuple) -> int:
    """How many leading dims (before `dim`) `index` is expanded over, zero strides at
    `shape`'s full extents, while fitting `shape` after them (DeBERTa's relative positions
    ``pos.expand(B * H, L, L)``), or 0 where that is none or the index is small."""
    k = 0
    while k < dim and index.strides[k] == 0 and index.shape[k] == shape[k]:
        k += 1
    if not k or index.size < 4096 or not _fits(index.shape[k:], dim - k, shape[k:]):
        return 0
    return k


def _fits(index_shape: tuple, dim: int, shape: tuple) -> bool:
    """Whether an index of `index_shape` lies within `shape` along every dim but `dim`
    (PyTorch's rule for gather and scatter_add; numpy's take_along_axis would broadcast
    instead)."""
    return len(index_shape) > 0 and all(n <= shape[d] for d, n in enumerate(index_shape) if d != dim)


def _flat_positions(index, dim: int, shape: tuple):
    """Each element's position in the C-ordered flat array of `shape` when `index` gives
    its coordinate along `dim` and its own position the others (in range: checked;
    `_fits`)."""
    # (the strides in Python ints: numpy's cumprod of a tuple cost more than the gather
    # of a small index)
    strides = [1] * len(shape)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= int(shape[d])
    ishape = index.shape
    if 0 in index.strides and index.size > 1 and type(index) is np.ndarray:
        # an expanded index: scaled once per distinct entry, the offsets' add then spreads
        # it over the broadcast dims (a (800, 64) view of 800 rows: 88 -> ~25 us)
        index = index[tuple([slice(0, 1) if st == 0 and d != dim else slice(None)
                             for d, st in enumerate(index.strides)])]
    pos = index if index.dtype == np.int64 else index.astype(np.int64)
    if strides[dim] != 1:
        pos = pos * strides[dim]
    arange = module_of(index).arange
    offsets = None
    for d, n in enumerate(ishape):
        if d != dim and n > 1:
            view = [1] * len(ishape)
            view[d] = n
            # (each dim's offsets in one arange: a small gather's cost is its calls)
            step = arange(0, n * strides[d], strides[d], dtype=np.int64).reshape(view)
            offsets = step if offsets is None else offsets + step
    if offsets is not None:
        return pos + offsets
    return pos


def _positions_call(shapes, params, op: str):
    """The flat positions of a small index that fits the input (`_fits`), for the plan calls
    of gather and scatter_add: `_flat_positions` with the other dims' offsets made once per
    signature (a (4, 65) gather by a (4, 1) index: most of its cost was building them),
    after the range check; None for other signatures."""
    sa, si = shapes[0], shapes[1]
    dim = params["dim"]
    if (sa is None or si is None or len(sa) != len(si) or 0 in si or math.prod(si) > 4096
            or not _fits(si, dim, sa)):
        return None
    stride, n = math.prod(sa[dim + 1:]), sa[dim]
    offsets = _flat_positions(np.zeros(si, np.int64), dim, sa)

    def positions(index):
        check_index_range(op, index, dim, n)
        pos = index.astype(np.int64, copy=False)
        return (pos * stride if stride != 1 else pos) + offsets
    return positions


def _gather_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_gather_impl`'s flat read."""
    positions = _positions_call(shapes, params, "gather")
    if positions is None:
        return None
    # (ndarray.take reads the C-ordered flat positions of any layout: no copy nor view made)
    return lambda a, index: a.take(positions(index))


def _gather_vjp(g, out, a, index, dim):
    # (`dim` is gather's normalized one: scatter_add's own normalization is skipped)
    return (bind(SCATTER_ADD, creation.zeros(a.shape, dtype=g.dtype, device=g.device), index, g, dim=dim), None)


GATHER = defprim("gather", _gather_impl, _gather_rule, _gather_vjp, kind="index",
                 save=lambda rq: (1,), nondiff=(1,), extra={"meta": (0,), "fast": _gather_fast, "batch": shift_dims})


def _scatter_add_rule(a, index, src, dim):
    if not (index.shape == src.shape):
        raise ShapeError(f"scatter_add: index shape {index.shape} must equal src shape {src.shape}")
    if not index.dtype.is_integer:
        raise IndexRangeError(f"scatter_add: index must be an integer tensor, got {index.dtype.name}")
    if src.dtype is not a.dtype:
        raise DTypeError(f"scatter_add: src dtype {src.dtype.name} must match self dtype {a.dtype.name}")
    if index.ndim != a.ndim:
        raise ShapeError(f"scatter_add: index rank {index.ndim} must equal self rank {a.ndim} "
                         f"(self {a.shape}, index {index.shape})")
    check_index_within("scatter_add", index, a, dim)
    return Aval(a.shape, a.dtype, a.device)


def _scatter_add_impl(xp, a, index, src, dim):
    check_index_range("scatter_add", index, dim, a.shape[dim])
    out = a.copy()
    if xp is np and index.size and _fits(index.shape, dim, a.shape):
        # np.add.at over one flat array is numpy's fast form (10x the n-d one for 100k
        # elements); both add in the index's C order, so the result is the same bitwise
        np.add.at(out.reshape(-1), _flat_positions(index, dim, a.shape).reshape(-1), src.reshape(-1))
        return out
    # (open grids built by hand: cupy's indices has no `sparse`)
    nd = index.ndim
    grids = [xp.arange(k).reshape((1,) * d + (k,) + (1,) * (nd - d - 1))
             for d, k in enumerate(index.shape)]
    grids[dim] = index
    if xp is np:
        np.add.at(out, tuple(grids), src)
    else:  # pragma: no cover - GPU only
        import cupyx
        cupyx.scatter_add(out, tuple(grids), src)
    return out


def _scatter_add_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_scatter_add_impl`'s flat
    np.add.at (gather's backward)."""
    positions = _positions_call(shapes, params, "scatter_add")
    if positions is None:
        return None

    def scatter_add_small(a, index, src):
        out = a.copy()
        np.add.at(out.reshape(-1), positions(index).reshape(-1), src.reshape(-1))
        return out
    return scatter_add_small


SCATTER_ADD = defprim("scatter_add", _scatter_add_impl, _scatter_add_rule,
                      lambda g, out, a, index, src, dim: (g, None, gather(g, dim, index)),
                      kind="index", save=lambda rq: (1,), nondiff=(1,), extra={"fast": _scatter_add_fast})


def on_one_element(fn, op: str, a, dim, index, *args, **kwargs):
    """``fn(a, dim, index, ...)`` of a 0-d `a`, as PyTorch's: run on one-element 1-D views
    of `a`, `index` and the 0-d tensor arguments, the result viewed back 0-d."""
    normalize_dim(dim, 0, op)

    def one(t):
        return reshape(t, (1,)) if getattr(t, "ndim", None) == 0 else t
    return reshape(fn(one(a), 0, one(index), *map(one, args), **{k: one(v) for k, v in kwargs.items()}), ())


def gather(a, dim: int, index, *, sparse_grad: bool = False):
    """``out[i][j] = a[index[i][j]][j]`` along `dim`. `sparse_grad` is accepted for PyTorch's
    signature; the gradient is dense either way (as ``nn.Embedding(sparse=True)``'s)."""
    if a.ndim == 0:   # (PyTorch's: index-shaped, as ever)
        normalize_dim(dim, 0, "gather")
        return reshape(gather(reshape(a, (1,)), 0, reshape(index, (-1,))), tuple(index.shape))
    return bind(GATHER, a, index, dim=normalize_dim(dim, a.ndim, "gather"))


def take_along_dim(a, indices, dim=None):
    """PyTorch's argument order (input, indices, dim); dim=None works on the flattened input
    (where, as PyTorch's, an index must lie in range). The other dims broadcast, as
    PyTorch's (gather reads a prefix of them instead)."""
    if dim is None:
        return gather(reshape(a, (-1,)), 0, reshape(indices, (-1,)))
    d = normalize_dim(dim, a.ndim, "take_along_dim")
    if indices.ndim != a.ndim:
        raise ShapeError(f"take_along_dim: input {tuple(a.shape)} and indices {tuple(indices.shape)} must have "
                         f"the same number of dims")
    if not indices.dtype.is_integer:
        raise IndexRangeError(f"take_along_dim: indices must be an integer tensor, got {indices.dtype.name}")
    if not (isinstance(a.shape[d], int) and a.shape[d] == 0):
        # PyTorch's: an index along a dim is taken modulo its size (-1 is the last element)
        from .elementwise import remainder
        indices = remainder(indices, a.shape[d])
    if tuple(a.shape) != tuple(indices.shape):
        from ..broadcasting import broadcast_shapes
        from .shape import expand
        others = broadcast_shapes("take_along_dim", *((*t.shape[:d], 1, *t.shape[d + 1:]) for t in (a, indices)))
        a, indices = (expand(t, *others[:d], t.shape[d], *others[d + 1:]) for t in (a, indices))
    return gather(a, d, indices)


def src_prefix(op: str, src, index):
    """The leading index-shaped block of `src`: PyTorch reads only that much of a larger
    `src` (each dim of `index` at most `src`'s)."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    if src.ndim != index.ndim or any(n > m for n, m in zip(index.shape, src.shape)):
        raise ShapeError(f"{op}: index of shape {tuple(index.shape)} is larger than src of "
                         f"shape {tuple(src.shape)}")
    from .indexing import getitem
    return getitem(src, tuple(slice(0, n) for n in index.shape))


def scatter_add(a, dim: int, index, src):
    if a.ndim == 0:
        return on_one_element(scatter_add, "scatter_add", a, dim, index, src)
    src = src_prefix("scatter_add", src, index)
    return bind(SCATTER_ADD, a, index, src, dim=normalize_dim(dim, a.ndim, "scatter_add"))
