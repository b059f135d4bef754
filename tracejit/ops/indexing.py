"""Indexing primitives: getitem, index_put (``x[i] = v``), index_add, gather, scatter_add.

An index is normalized into a hashable *spec* (so it can live in IR params; ops/index_keys.py):
a tuple of ``("s", start, stop, step)`` slices, ``("i", k)`` integers, ``("n",)`` for None,
and ``("t", j)`` for the j-th index tensor, which travels as an op input.
"""
from __future__ import annotations

import math
from operator import itemgetter

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..errors import IndexRangeError, ShapeError, numpy_index_error
from ..shapes import Sym, broadcast_shapes, data_dependent, normalize_dim
from ..tensor import Tensor
from . import creation
from .elementwise import cast, where
from .axis_add import add_along_axis
from .distinct_add import add_distinct, wrapped
from .donation import donating, target
from .registry import Aval, defprim
from .eager import bind, remember_plain, trace_hooks, trace_state
from .grad_views import recording
from .shape import _whole_view
from .index_keys import flat_mask, put_flat, normalize as _normalize, nonzero, refuse_other_dtype, with_bools
from .gather_prim import check_index_range, gather, in_range, scatter_add, take_along_dim  # noqa: F401 (this module's names)
from . import masked_assign as _masked

__all__ = ["getitem", "index_put", "gather", "scatter_add",
           "index_select", "nonzero", "take_along_dim", "in_range"]


def _locate(arr, spec, idx_arrays):
    """(view, key) with ``view[key]`` the indexed region of `arr`, with PyTorch's meaning.

    PyTorch applies integer indices (0-d index tensors among them) first, as selects, and
    only then the index tensors, so ``x[0, :, [1, 2]]`` has shape (3, 2) for x of shape
    (2, 3, 4) where numpy, which treats the 0 as one more advanced index, gives (2, 3).
    When ints meet index tensors we select with the ints first (a view, so writes through
    it reach `arr`).
    """
    ints = [_selects(x, idx_arrays) for x in spec]
    if not any(ints) or all(ints[j] or x[0] != "t" for j, x in enumerate(spec)):
        return arr, _np_index(spec, idx_arrays)
    first = tuple((x[1] if x[0] == "i" else int(idx_arrays[x[1]])) if i else slice(None)
                  for x, i in zip(spec, ints) if x[0] != "n")
    rest = tuple(x for x, i in zip(spec, ints) if not i)
    return arr[first], _np_index(rest, idx_arrays)


def _selects(x, idx) -> bool:
    """Whether spec item `x` selects one element of its dim (an int or a 0-d index tensor,
    whose `idx` entry has no dims), removing the dim before the index tensors apply."""
    return x[0] == "i" or (x[0] == "t" and not idx[x[1]].shape)


def _np_index(spec, idx_arrays):
    out = []
    for x in spec:
        k = x[0]
        if k == "s":
            out.append(slice(x[1], x[2], x[3]))
        elif k == "i":
            out.append(x[1])
        elif k == "n":
            out.append(None)
        else:
            out.append(idx_arrays[x[1]])
    return tuple(out)


def _slice_len(d, start, stop, step):
    step = 1 if step is None else step
    if type(step) is int and step > 1 and any(isinstance(v, Sym) for v in (d, start, stop)):
        # A positive stride (``x[..., ::2]``): ceil of the unit stride's length, symbolic
        # where that is (a floor division of sizes is exact or a derived symbol: shapes.py)
        n = _slice_len(d, start, stop, 1)
        return (n + step - 1) // step if isinstance(n, Sym) else len(range(0, n, step))
    if isinstance(d, Sym):
        if step == 1 and (start is None or (isinstance(start, int) and start >= 0)) and (
                stop is None or (isinstance(stop, int) and stop < 0)):
            # In range for the hint; past the least size (``x[3:]`` of a dim of 2, of a
            # remainder ``x[:n % 4][1:]``) only where guarded
            n = d - (start or 0) + (stop or 0)
            if (n.hint if isinstance(n, Sym) else n) > 0 and _never_negative(n):
                return n
    if step == 1 and any(isinstance(v, Sym) for v in (d, start, stop)):
        # Bounds that are symbolic sizes (``rec[n - k:]``): the length is symbolic too when
        # 0 <= start <= stop <= d holds for every size the symbols can take.
        lo = 0 if start is None else _from_end(start, d)
        hi = d if stop is None else _from_end(stop, d)
        # A bound past the end is clamped to it, as Python slices are: one guard (n >= d)
        # serves every such n instead of one capture per value.
        lo, hi = _clamped(lo, d), _clamped(hi, d)
        if all(_never_negative(v) for v in (lo, hi - lo, d - hi)):
            return hi - lo
    if isinstance(d, Sym):
        d = int(d)  # specialize: other slices need the concrete size
    return len(range(*slice(start, stop, step).indices(d)))


def _from_end(b, d):
    """A negative slice bound counts from the end of a dim of size `d` (a symbolic one,
    ``x[:, -n:]``, where it is negative for every call the capture serves: guarded)."""
    if isinstance(b, Sym):
        return d + b if b.hint < 0 and _never_negative(-b - 1) else b
    return d + b if b < 0 else b


def _clamped(b, d):
    """`d` where the slice bound `b` lies past the end of a dim of size `d` in this call and
    that can be guarded for every call the capture serves, else `b`."""
    if not isinstance(b, Sym) and not isinstance(d, Sym):
        return b
    past = b - d
    if (past.hint if isinstance(past, Sym) else past) <= 0:
        return b
    return d if _never_negative(past) else b


def _never_negative(v) -> bool:
    if isinstance(v, Sym):
        low = v.lower_bound()
        if low is not None and low >= 0:
            return True
        return trace_hooks.assume_nonnegative(v, "a slice bound", dims=True)   # guarded where it can
    return v >= 0


def _result_shape(a_shape, spec, idx_avals, op="index"):
    """Result shape of basic + advanced indexing, with PyTorch's meaning (see `_locate`):
    integers (and 0-d index tensors) remove their dim first; the index tensors then
    broadcast together and their shape goes where the first of them was if they are
    adjacent, else to the front."""
    shape = []
    adv_pos = None
    adv_shapes = []
    last_adv = None
    separated = False
    dim = 0
    pos = -1
    for x in spec:
        k = x[0]
        if _selects(x, idx_avals):
            d = a_shape[dim]
            i = x[1] if k == "i" else 0
            if isinstance(d, int) and not -d <= i < d:
                raise IndexRangeError(f"{op}: index {i} is out of bounds for dimension {dim} with size {d}")
            dim += 1
            continue
        pos += 1  # position among the entries that remain after the integer selects
        if k == "n":
            shape.append(1)
            continue
        d = a_shape[dim]
        if k == "s":
            shape.append(_slice_len(d, x[1], x[2], x[3]))
        else:
            adv_shapes.append(tuple(idx_avals[x[1]].shape))
            if adv_pos is None:
                adv_pos = len(shape)
            elif last_adv != pos - 1:
                separated = True
            last_adv = pos
        dim += 1
    shape.extend(a_shape[dim:])
    if adv_shapes:
        b = broadcast_shapes(op, *adv_shapes) if len(adv_shapes) > 1 else adv_shapes[0]
        if separated:
            shape = list(b) + shape
        else:
            shape = shape[:adv_pos] + list(b) + shape[adv_pos:]
    return tuple(shape)


def _getitem_rule(a, *idx, spec):
    return Aval(_result_shape(a.shape, spec, idx, "getitem"), a.dtype, a.device)


def _getitem_impl(xp, a, *idx, spec):
    if xp is np and len(idx) == 1:
        axis = _take_axis(spec)
        if axis is not None:
            return _taker(axis)(a, idx[0])
    try:
        view, key = _locate(a, spec, idx)
        if not idx:
            key += (Ellipsis,)   # an all-integer index: a 0-d view, as in PyTorch
        return view[key]
    except IndexError as e:
        raise numpy_index_error("getitem", e) from None


def _getitem_vjp(g, out, a, *idx, spec):
    if not recording(g) and _is_basic(spec):
        # (written here with the spec's cached key: through index_put's bind a loop over
        # many specs, a lattice's (t, u), would build a dispatch plan per spec)
        z = np.zeros(a.shape, g._data.dtype)
        z[_basic_key(spec)[0]] = g._data
        return (Tensor._wrap(z, g.dtype, CPU),)
    base = creation.zeros(a.shape, dtype=g.dtype, device=g.device)
    if trace_state.tracer is None and type(base._data) is np.ndarray:
        # the fresh zeros are this call's own: added into, not copied first (an
        # embedding table's gradient: 24 MB less written per step); a slice's, whose
        # elements are distinct, written (as PyTorch's slice backward): not read first
        # (a (4, 64, 511) slice: ~2.5x faster than adding into the zeros)
        fn = bind_index_put if _is_basic(spec) else index_add_
        return (donating(base._data, fn, base, g, idx, spec),) + (None,) * len(idx)
    return (index_add_(base, g, idx, spec),) + (None,) * len(idx)


def _is_basic(spec):
    # (a loop, not all() of a generator: asked per getitem node a view's freshness walk
    # passes, and per plan)
    for x in spec:
        if x[0] == "t":
            return False
    return True


_ALL = ("s", None, None, None)
_FULL_SLICE = slice(None)


def _take_axis(spec):
    """The axis of the one index tensor of a spec whose other items are whole slices
    (``x[idx]``, ``x[:, idx]``), else None: numpy's ``take`` along it is 3-5x faster than
    fancy indexing."""
    axis = None
    for d, x in enumerate(spec):
        if x[0] == "t":
            if axis is not None:
                return None
            axis = d
        elif x != _ALL:
            return None
    return axis


_TAKERS: dict = {}


def _taker(axis: int):
    """``take(a, index)``: `a` indexed by the integer array `index` along `axis`, negative
    entries counting from the end and one out of range raising getitem's IndexError. (The
    method: np.take's Python wrapper cost ~1.3 us of a (256, 64) array's 32 rows.)"""
    fn = _TAKERS.get(axis)
    if fn is None:
        def fn(a, index):
            try:
                return a.take(index, axis)
            except IndexError as e:
                raise numpy_index_error("getitem", e) from None
        _TAKERS[axis] = fn
    return fn


def _getitem_fast(shapes, dtype, params):
    """The plan's numpy call for basic indexing: the numpy key made once per signature and
    applied by ``itemgetter``, not rebuilt per call. A trailing Ellipsis keeps an
    all-integer index a 0-d view, not a numpy scalar."""
    spec = params["spec"]
    if len(shapes) == 2:
        axis = _take_axis(spec)
        return None if axis is None else _taker(axis)
    if len(shapes) != 1 or not _is_basic(spec):
        return None
    return itemgetter(_np_index(spec, ()) + (Ellipsis,))


GETITEM = defprim("getitem", _getitem_impl, _getitem_rule, _getitem_vjp, kind="index",
                  save=lambda rq: tuple(range(1, len(rq))), nondiff=tuple(range(1, 64)),
                  extra={"meta": (0,), "selects": True, "view_if": lambda params: _is_basic(params["spec"]),
                         "fast": _getitem_fast,
                         "batch": lambda n, p, *a: None if len(a) > 1 else {"spec": (_ALL,) + p["spec"]}})


def _index_put_rule(a, v, *idx, spec):
    target = tuple(_result_shape(a.shape, spec, idx, "index_put"))
    vshape = tuple(v.shape)
    while len(vshape) > len(target) and isinstance(vshape[0], int) and vshape[0] == 1:
        vshape = vshape[1:]  # leading size-1 dims of the value are dropped, as in PyTorch
    if len(vshape) > len(target) or any(
            not (vd == td or (isinstance(vd, int) and vd == 1))
            for vd, td in zip(vshape[::-1], target[::-1])):
        data_dependent(*target)
        raise ShapeError(f"index_put: value of shape {v.shape} cannot be broadcast to the indexed "
                         f"region of shape {tuple(target)}")
    return Aval(a.shape, a.dtype, a.device)


def _index_put_impl(xp, a, v, *idx, spec):
    out = target(a)   # (`a` itself where donated: ``x[i] = v`` writes x's memory once)
    try:   # (numpy checks every index before it writes: `a` stays unchanged)
        if idx:
            view, key = _locate(out, spec, idx)
            n = view[key].ndim if getattr(v, "ndim", 0) else None
        else:
            view, (key, dims) = out, _basic_key(spec)
            n = out.ndim + dims
        if n is not None and getattr(v, "ndim", 0) > n:
            v = v.reshape(v.shape[v.ndim - n:])  # drop leading 1s
        view[key] = v
    except IndexError as e:
        raise numpy_index_error("index_put", e) from None
    return out


_BASIC_KEYS: dict = {}


def _basic_key(spec) -> tuple:
    """(numpy key, dims it adds to the array's) of a spec without index tensors, made once
    per spec: a lattice's cell by cell writes and their gradients' adds (hundreds of calls a
    step) then cost the write alone."""
    got = _BASIC_KEYS.get(spec)
    if got is None:
        if len(_BASIC_KEYS) > 4096:   # (an eager loop writing x[i] for every i)
            _BASIC_KEYS.clear()
        got = _BASIC_KEYS[spec] = (_np_index(spec, ()), sum(x[0] == "n" for x in spec) - sum(x[0] == "i" for x in spec))
    return got


def _index_put_vjp(g, out, a, v, *idx, spec):
    # (g read before it is written: a compiled backward may then write g's memory)
    gv = getitem_(g, idx, spec) if not isinstance(v, (int, float, bool)) else None
    ga = bind(INDEX_PUT, g, 0.0, *idx, spec=spec)
    return (ga, gv) + (None,) * len(idx)


def _batch_put(prim):
    """A batching rule (registry ``extra["batch"]``) of a write into a basic-indexed region:
    the batch dim indexed whole, the values' dims aligned with the region's."""
    def rule(n, p, a, v, *idx):
        if idx:   # (tensor indices: the spec names them)
            return None
        rank = _getitem_rule(a, spec=p["spec"]).ndim
        if v.ndim > rank:
            return None

        def run(ab, vb):
            if isinstance(vb, Tensor):
                vb = vb.reshape((n,) + (1,) * (rank - v.ndim) + tuple(v.shape))
            return bind(prim(), ab, vb, **{**p, "spec": (_ALL,) + p["spec"]})
        return run
    return rule


INDEX_PUT = defprim("index_put", _index_put_impl, _index_put_rule, _index_put_vjp, kind="index",
                    save=lambda rq: tuple(range(2, len(rq))), nondiff=tuple(range(2, 64)),
                    extra={"donates": True, "batch": _batch_put(lambda: INDEX_PUT)})


_FEW = 512   # elements added below which np.add.at runs as it is


def _index_add_impl(xp, a, v, *idx, spec, nonneg=False):
    if nonneg:   # (a scatter_add's rows: a negative index is out of range, not counted from the end)
        check_index_range("scatter_add", idx[0], 0, a.shape[0])
    out = target(a)   # (`a` itself where donated: ops/donation.py)
    if not idx:
        out[_basic_key(spec)[0]] += v
        return out
    view, key = _locate(out, spec, idx)
    if _is_basic(spec):
        view[key] += v
    elif xp is np:
        # np.add.at itself for a few elements: numpy 2's loop then costs less than the
        # checks that would replace it (3.5 us for 32 against add_distinct's 18)
        if getattr(v, "size", 0) <= _FEW or (not add_distinct(view, key, v) and not _add_rows(view, key, v)
                                             and not add_along_axis(view, key, v)):
            np.add.at(view, key, v)  # repeated indices accumulate
    else:  # pragma: no cover - GPU only
        import cupyx
        cupyx.scatter_add(view, key, v)
    return out


def _add_rows(view, key, v) -> bool:
    """``view[key] += v`` with repeats accumulating, where it adds whole rows by integer
    index arrays on the first dims (trailing whole slices add nothing: ``x[idx, :]`` adds
    the rows ``x[idx]`` does), all in range: one np.add.at of flat positions, numpy's fast
    form (~5x faster than by the index arrays for 10556 64-wide rows into 2708), the same
    additions in the same order. False (nothing done) for any other index."""
    while len(key) > 1 and type(key[-1]) is slice and key[-1] == _FULL_SLICE:
        key = key[:-1]
    if not view.flags.c_contiguous or not all(type(i) is np.ndarray and i.dtype.kind in "iu" for i in key):
        return False
    try:
        idx = np.broadcast_arrays(*key) if len(key) > 1 else key
    except ValueError:
        return False
    k = len(key)
    if k > view.ndim or v.shape != idx[0].shape + view.shape[k:]:
        return False
    rows = 0
    for d, i in enumerate(idx):
        # (-1 and n-1 are one row; None out of range: np.add.at raises numpy's IndexError)
        at = wrapped(i.reshape(-1), view.shape[d])
        if at is None:
            return False
        rows = rows * view.shape[d] + at
    width = math.prod(view.shape[k:])
    at = rows if width == 1 else (rows[:, None] * width + np.arange(width)).reshape(-1)
    np.add.at(view.reshape(-1), at, v.reshape(-1))
    return True


def _index_add_vjp(g, out, a, v, *idx, spec, nonneg=False):
    return (g, getitem_(g, idx, spec)) + (None,) * len(idx)


INDEX_ADD = defprim("index_add", _index_add_impl,
                    lambda a, v, *idx, spec, nonneg=False: _index_put_rule(a, v, *idx, spec=spec),
                    _index_add_vjp, kind="index",
                    save=lambda rq: tuple(range(2, len(rq))), nondiff=tuple(range(2, 64)),
                    extra={"donates": True, "batch": _batch_put(lambda: INDEX_ADD)})


def getitem_(a, idx, spec):
    return bind(GETITEM, a, *idx, spec=spec)


def index_add_(base, v, idx, spec):
    return bind(INDEX_ADD, base, v, *idx, spec=spec)


def bind_index_put(base, v, idx, spec):
    return bind(INDEX_PUT, base, v, *idx, spec=spec)


_ONE_TENSOR = (("t", 0),)


def getitem(a, index):
    if type(index) is Tensor and index.dtype.is_integer and a.ndim and index.dtype is not _dt.uint8:
        # x[idx] with one integer tensor (an embedding lookup, a minibatch by index): the
        # spec `_normalize` would give, without its loop
        return bind(GETITEM, a, index, spec=_ONE_TENSOR)
    spec = _plain_spec(a, index)
    if spec is not None:
        return _whole_view(a) if spec is _WHOLE else bind(GETITEM, a, spec=spec)
    if isinstance(index, Tensor) and index.ndim == 0 and index.dtype is _dt.bool_:
        # a 0-d mask adds a dim of 1 or 0 elements, as PyTorch's
        return getitem(a.unsqueeze(0), index.reshape(1))
    flat = flat_mask(a, index)
    if flat is not None:
        return getitem(*flat)
    spec, tensors = _normalize(a, index)
    if spec is None:   # (x[True, 1]: a new dim, indexed)
        bools = with_bools(a, index)
        return getitem(bools[0], bools[1])
    if not tensors and all(x == ("s", None, None, None) for x in spec):
        return _whole_view(a)
    out = bind(GETITEM, a, *tensors, spec=spec)
    if trace_state.tracer is not None:
        _masked.note_selection(out, a, index)   # (b[mask], kept for ``a[mask] = b[mask]``)
    return out


# The spec of an index of plain ints, slices of ints, None and Ellipsis depends only on it
# and the rank: kept per (rank, index), since `_normalize`'s loop cost more than the op
# (x[1]: 2.5 µs of 5.9). A slice is keyed by its int-or-None bounds; anything else, or a
# call that raises, takes `_normalize` and is never kept.
_SPECS: dict = {}
_MAX_SPECS = 4096
_WHOLE = ()   # the value kept for an index that selects everything (x[...], x[()])
_INT_OR_NONE = (int, type(None))


def _plain_spec(a, index):
    t = type(index)
    if t is tuple:
        if slice in map(type, index):
            key = []
            for it in index:
                ti = type(it)
                if ti is slice:
                    b0, b1, b2 = it.start, it.stop, it.step
                    if (type(b0) not in _INT_OR_NONE or type(b1) not in _INT_OR_NONE
                            or type(b2) not in _INT_OR_NONE):
                        return None
                    key.append((b0, b1, b2))
                elif ti is int or it is None or it is Ellipsis:
                    key.append(it)
                else:
                    return None
            key = (a.ndim, slice, tuple(key))
        else:
            for it in index:
                if type(it) is not int and it is not None and it is not Ellipsis:
                    return None
            key = (a.ndim, index)
    elif t is int:
        key = (a.ndim, index)
    elif t is slice:
        return _plain_spec(a, (index,))
    else:
        return None
    spec = _SPECS.get(key)
    if spec is None:
        spec, _ = _normalize(a, index)
        if all(x == ("s", None, None, None) for x in spec):
            spec = _WHOLE
        if len(_SPECS) < _MAX_SPECS:
            _SPECS[key] = spec
            remember_plain(spec)
    return spec


def index_put(a, index, value, accumulate: bool = False):
    """``a`` with ``a[index] = value`` (PyTorch's ``index_put``; `index` a key or a tuple of
    index tensors); with accumulate, values at repeated positions add up (``a[index] += value``
    counting every repeat)."""
    refuse_other_dtype(a, index, value, accumulate)
    if a.dtype.itemsize > 2 or not a.dtype.is_floating_point:   # (PyTorch's half dtypes store inf)
        value = _dt.number_as(a.dtype, value, "index_put")
    if trace_state.tracer is not None and not accumulate:
        out = _masked.assign(a, index, value)   # a[mask] = b[mask] or a number: a where
        if out is not None:
            return out
    if (isinstance(index, Tensor) and index.ndim == 0 and index.dtype is _dt.bool_ and not accumulate
            and (not isinstance(value, Tensor) or value.ndim <= a.ndim)):
        # a 0-d mask: all of `a` or nothing (a value of a's shape, or broadcasting to it)
        out = where(index, cast(value, a.dtype) if isinstance(value, Tensor) else value, a)
        return out if out.dtype is a.dtype else cast(out, a.dtype)   # (a Python float into ints)
    flat = flat_mask(a, index)
    if flat is not None:
        return put_flat(a, flat, value, accumulate, index_put)
    spec, tensors = _plain_spec(a, index), ()   # (ints and slices: the spec getitem keeps)
    if spec is None or spec is _WHOLE:
        spec, tensors = _normalize(a, index)
    if spec is None:
        bools = with_bools(a, index)
        return index_put(bools[0], bools[1], value, accumulate).squeeze(bools[2])
    if isinstance(value, Tensor) and value.dtype is not a.dtype:
        value = cast(value, a.dtype)
    elif not isinstance(value, Tensor):
        if isinstance(value, (list, tuple, np.ndarray)):
            value = creation.as_tensor(value, dtype=a.dtype, device=a.device)
        elif not isinstance(value, (int, float, bool, complex, np.number)):
            raise TypeError(f"can't assign a {type(value).__name__} to a tensor")
    if accumulate:
        if not isinstance(value, Tensor):
            value = creation.as_tensor(value, dtype=a.dtype, device=a.device)
        if value.ndim <= len(spec) and tensors:   # (fewer dims than the region may have)
            region = _result_shape(a.shape, spec, tensors, "index_put")
            if value.ndim < len(region) and all(v in (1, r) for v, r in zip(value.shape[::-1], region[::-1])):
                value = value.expand(region)   # (numpy's add.at misreads a value of fewer dims)
        return bind(INDEX_ADD, a, value, *tensors, spec=spec)
    return bind(INDEX_PUT, a, value, *tensors, spec=spec)


def index_select(a, dim: int, index):
    d = normalize_dim(dim, a.ndim, "index_select")
    if index.ndim > 1:
        raise IndexError(f"index_select: index must be a 0-D or 1-D tensor, got shape {tuple(index.shape)}")
    if index.ndim == 0:
        index = index.reshape(1)   # (a 0-d index keeps the dim, of size 1, as PyTorch's)
    if a.ndim == 0:   # (a 0-d input reads as one element, the result 0-d, as PyTorch's)
        if index.shape[0] != 1:
            raise ShapeError(f"index_select: an index into a 0-d tensor must have one value, got {index.shape[0]}")
        return index_select(a.reshape(1), 0, index).reshape(())
    spec = _SELECT_SPECS.get(d)
    if spec is None:   # (the spec getitem would make of ``(slice(None),) * d + (index,)``)
        spec = _SELECT_SPECS[d] = remember_plain((_ALL,) * d + _ONE_TENSOR)
    n = a._data.shape[d] if type(a._data) is np.ndarray else a.shape[d]   # (no Size built per call)
    return bind(GETITEM, a, in_range(index, n, "index_select"), spec=spec)


_SELECT_SPECS: dict = {}   # index_select's getitem spec per dim, one object each
