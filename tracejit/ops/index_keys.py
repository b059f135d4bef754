"""Index keys as PyTorch reads them, normalized into a hashable *spec* (ops/indexing.py).

A spec is a tuple of ``("s", start, stop, step)`` slices, ``("i", k)`` integers, ``("n",)``
for None, and ``("t", j)`` for the j-th index tensor, which travels as an op input. Boolean
masks become their nonzero coordinates (one index tensor per dim they cover, a size known
only from the data); a uint8 tensor is a mask too, as PyTorch (deprecated there). A list
that holds a sequence, a tensor, a slice, None or Ellipsis is a tuple (``x[[[0, 1], [2,
3]]]`` is ``x[[0, 1], [2, 3]]``); a Python bool or a 0-d bool tensor among other items is a
new dim of 1 indexed by ``[0]`` (True), ``[]`` (False) or the tensor's nonzero (`with_bools`).
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..errors import DTypeError, user_stacklevel
from ..shapes import Sym
from ..tensor import Tensor
from . import creation
from .donation import donated, donating
from .eager import remember_plain, trace_hooks, trace_state
from .host_steps import host_step
from .shape import reshape, stack

__all__ = ["nonzero", "refuse_other_dtype", "flat_mask", "put_flat"]

_SEQUENCE_ITEMS = (list, tuple, np.ndarray, Tensor, slice, type(None), type(Ellipsis))


def as_tuple(index) -> tuple:
    """`index` as a tuple of items, a list read as PyTorch reads it (see the docstring)."""
    if type(index) is tuple:
        return index
    if type(index) is list and len(index) < 32:
        for v in index:
            if isinstance(v, _SEQUENCE_ITEMS):
                return tuple(index)
    return (index,)


def _is_bool(it) -> bool:
    return type(it) is bool or (isinstance(it, Tensor) and it.dtype is _dt.bool_ and it.ndim == 0)


def with_bools(a, index):
    """(a unsqueezed, index, dim) for an index holding a bool item, the first one turned
    into an index tensor over the new dim `dim`; None when it holds none (or is a 0-d
    mask alone: the callers' own form)."""
    items = as_tuple(index)
    k = next((i for i, it in enumerate(items) if _is_bool(it)), None)
    if k is None:
        return None

    def dims(its):
        return sum(_consumed(it) for it in its)
    before, after = items[:k], items[k + 1:]
    dim = a.ndim - dims(after) if any(it is Ellipsis for it in before) else dims(before)
    b = items[k]
    idx = nonzero(b.reshape(1), as_tuple=True)[0] if isinstance(b, Tensor) else \
        creation.as_tensor(np.zeros(int(b), np.int64), device=a.device)
    return a.unsqueeze(dim), before + (idx,) + after, dim


def _consumed(it) -> int:
    """The dims of the indexed tensor that index item `it` takes."""
    if it is None or it is Ellipsis or _is_bool(it):
        return 0
    if isinstance(it, Tensor) and it.dtype in (_dt.bool_, _dt.uint8):
        return it.ndim
    if isinstance(it, (list, np.ndarray)) and np.asarray(it).dtype == bool:
        return np.asarray(it).ndim
    return 1


# The spec of a tuple of integer tensors, ints, slices of ints, None and Ellipsis depends
# only on the rank and on each item (a tensor's position, not its values): kept per such
# key, since the loop below cost a third of ``x[..., idx]`` (5.6 us of 18). Anything else,
# or a call that raises, takes the loop and is never kept.
_KEPT: dict = {}
_MAX_KEPT = 4096
_SLICE = "slice"


def _kept_key(a, index):
    """The `_KEPT` key of `index` (a tuple) for `a`, or None where its spec is not kept. A
    short list of ints is keyed by its values (its index tensor is `_int_list`'s)."""
    key = [a.ndim]
    tensors = 0
    for it in index:
        t = type(it)
        if t is Tensor:
            dt = it.dtype
            if not dt.is_integer or dt is _dt.uint8:
                return None
            key.append(Tensor)
            tensors += 1
        elif t is list:
            if not 0 < len(it) <= _MAX_LIST:
                return None
            for v in it:
                if type(v) is not int:
                    return None
            key.append((list, tuple(it)))
            tensors += 1
        elif t is int or it is None or it is Ellipsis:
            key.append(it)
        elif t is slice:
            b0, b1, b2 = it.start, it.stop, it.step
            if not (type(b0) in _INT_OR_NONE and type(b1) in _INT_OR_NONE and type(b2) in _INT_OR_NONE):
                return None
            key.append((_SLICE, b0, b1, b2))
        else:
            return None
    return tuple(key) if tensors else None


_INT_OR_NONE = (int, type(None))


# (a list longer than this is rather data: its values are no key)
_MAX_LIST = 16


def normalize(a, index):
    """-> (spec, index tensors); (None, None) for an index holding a bool (`with_bools`)."""
    t = type(index)
    if t is list:    # (a list: its items, or one index, as `_normalize` reads it)
        index = as_tuple(index)
    elif t is not tuple:
        return _normalize(a, index)
    key = _kept_key(a, index)
    if key is None:
        return _normalize(a, index)
    spec = _KEPT.get(key)
    if spec is not None:
        tensors = []
        for it in index:
            t = type(it)
            if t is Tensor:
                tensors.append(it)
            elif t is list:
                tensors.append(_int_list(it))
        return spec, tensors
    spec, tensors = _normalize(a, index)
    if spec is not None and len(_KEPT) < _MAX_KEPT:
        _KEPT[key] = remember_plain(spec)   # (bind then takes it without checking its items)
    return spec, tensors


# A kept list's index array by its values: read-only, shared by the eager calls that give
# that list (``x[..., [-1]]`` made a tensor from the list on every call).
_LISTS: dict = {}


def _int_list(values: list) -> Tensor:
    """The index tensor `_normalize` makes of a list of ints (the values of a kept key)."""
    if trace_state.tracer is not None:   # (a capture's constants are its own)
        return creation.as_tensor(np.asarray(values))
    key = tuple(values)
    arr = _LISTS.get(key)
    if arr is None:
        arr = np.asarray(values)
        arr.flags.writeable = False
        if len(_LISTS) >= _MAX_KEPT:
            _LISTS.clear()
        _LISTS[key] = arr
    return Tensor._wrap(arr, _dt.as_dtype(arr.dtype), CPU)


def _normalize(a, index):
    tensors = []
    items = []
    masks = {}   # the position in `tensors` of a mask's first coordinate -> the mask's shape
    for it in as_tuple(index):
        if isinstance(it, range):   # a sequence of ints, as PyTorch reads it
            it = np.arange(it.start, it.stop, it.step, dtype=np.int64)
        if isinstance(it, (list, np.ndarray, Tensor)):
            if isinstance(it, Tensor):
                t = it
            else:
                arr = np.asarray(it)
                if arr.size == 0 and arr.dtype.kind == "f":
                    arr = arr.astype(np.int64)  # x[[]] selects nothing, as in PyTorch
                t = creation.as_tensor(arr)
            if t.dtype is _dt.uint8:
                warnings.warn("indexing with a uint8 tensor reads it as a mask, as PyTorch (deprecated "
                              "there); use a bool tensor instead", UserWarning, stacklevel=user_stacklevel())
                t = t.bool()
            if t.dtype is _dt.bool_:
                if not t.ndim and not isinstance(index, Tensor):
                    return None, None
                masks[len(tensors)] = tuple(t.shape)
                for nz in nonzero(t, as_tuple=True):
                    items.append(("t", len(tensors)))
                    tensors.append(nz)
                continue
            if not t.dtype.is_integer:
                raise IndexError(f"tensors used as indices must be integer or bool, got {t.dtype.name}")
            items.append(("t", len(tensors)))
            tensors.append(t)
        elif isinstance(it, slice):
            if any(isinstance(v, Tensor) for v in (it.start, it.stop, it.step)):
                # x[i:i + 16] with i a one-element integer tensor, as PyTorch takes it
                it = slice(*(_bound(v) if isinstance(v, Tensor) else v
                             for v in (it.start, it.stop, it.step)))
            for v in (it.start, it.stop, it.step):
                if v is not None and not isinstance(v, (int, Sym, np.integer)):
                    raise TypeError(f"slice indices must be integers or None, got {v!r}")
            if it.step is not None and it.step <= 0:
                raise ValueError("step must be greater than zero")
            items.append(("s", it.start, it.stop, it.step))
        elif it is None:
            items.append(("n",))
        elif it is Ellipsis:
            items.append(("e",))
        elif isinstance(it, (int, np.integer)) and not isinstance(it, bool):
            items.append(("i", int(it)))
        elif type(it) is bool:
            return None, None
        else:
            raise IndexError(f"unsupported index {it!r} of type {type(it).__name__}; use ints, slices, "
                             f"None, Ellipsis, integer tensors/lists or a bool mask")
    # Expand Ellipsis now so the spec is explicit.
    n_real = sum(1 for x in items if x[0] in ("s", "i", "t"))
    if sum(1 for x in items if x[0] == "e") > 1:
        raise IndexError("an index can only have a single ellipsis")
    if n_real > a.ndim:
        raise IndexError(f"too many indices for tensor of rank {a.ndim}: {n_real} given")
    out = []
    for x in items:
        if x[0] == "e":
            out.extend([("s", None, None, None)] * (a.ndim - n_real))
        else:
            if masks and x[0] == "t" and x[1] in masks:
                _check_mask(a, masks[x[1]], sum(1 for y in out if y[0] != "n"))
            out.append(x)
    return tuple(out), tensors


def flat_mask(a, index):
    """(`a` with its leading dims merged into one, the mask flattened) for an eager `index`
    that is a boolean mask of two or more dims matching `a`'s leading dims, else None.
    ``a[mask]`` is then the same selection from a dim of positions: numpy finds and reads
    them flat, where an n-d mask's nonzero builds a coordinate array per dim and indexes
    with all of them (a (16, 64, 512) mask: 5.3 ms of nonzero and write, 0.7 ms flat)."""
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    if (type(index) is not Tensor or index.dtype is not _dt.bool_ or index.ndim < 2
            or trace_state.tracer is not None):
        return None
    k = index.ndim
    shape = tuple(a.shape)
    if tuple(index.shape) != shape[:k] or not all(type(d) is int for d in shape):
        return None   # (the usual path raises for a mismatch)
    n = 1
    for d in shape[:k]:
        n *= d
    return reshape(a, (n,) + shape[k:]), reshape(index, (n,))


def put_flat(a, flat, value, accumulate: bool, index_put):
    """``index_put(a, mask, value, accumulate)`` through `flat_mask`'s `flat`, into a's own
    memory where a is donated (``x[mask] = v``): the merged view shares it."""
    merged, mask = flat
    if donated(a._data):
        out = donating(merged._data, index_put, merged, mask, value, accumulate)
        if out._data is merged._data and out.grad_fn is None:
            return Tensor._wrap(a._data, a.dtype, a.device)   # (written in place: a's array)
    else:
        out = index_put(merged, mask, value, accumulate)
    return reshape(out, tuple(a.shape))


def _check_mask(a, shape, dim) -> None:
    covered = tuple(a.shape[dim:dim + len(shape)])
    if covered != shape and any(isinstance(d, int) and d != m for d, m in zip(covered, shape)):
        raise IndexError(f"the shape of the mask {list(shape)} at index {dim} does not match the shape "
                         f"{list(covered)} of the indexed tensor's dims it covers")


def _bound(t: Tensor):
    """A one-element int tensor as a slice bound: its value; a traced int argument: a
    symbolic size where it may be one (jit/size_args.py)."""
    return trace_hooks.size_of(t) if getattr(t, "_trace", None) is not None else t.__index__()


_UNRAVEL_SIZE = 8192


def _nonzero_arrays(xp, a):
    """The coordinates of `a`'s nonzero elements, one int64 array per dim (one for a 0-d)."""
    if a.ndim == 0:   # as PyTorch: one element, rows of no coordinates (numpy refuses 0-d)
        return (xp.zeros(int(bool(a)), np.int64),)
    if xp is np and a.ndim >= 2 and a.size >= _UNRAVEL_SIZE:
        # numpy's n-d nonzero walks each element's coordinates: the flat positions, then
        # their coordinates, cost 2-4x less from here
        idx = np.unravel_index(np.flatnonzero(a), a.shape)
    else:
        idx = xp.nonzero(a)
    return idx if idx[0].dtype == np.int64 else tuple([i.astype(np.int64) for i in idx])


def nonzero(a, as_tuple: bool = False):
    k = max(a.ndim, 1)
    ts = host_step(_nonzero_arrays, [a], [("n",)] * k, [_dt.int64] * k, "nonzero")
    if as_tuple:
        return ts
    return stack(ts, 1)[:, :0] if a.ndim == 0 else stack(ts, 1)   # (a 0-d: rows of no coordinates)


def refuse_other_dtype(a, index, value, accumulate: bool) -> None:
    """Raise where PyTorch's ``index_put`` refuses tensor `value` for `a` under `index`: of
    another dtype under an index tensor, list or array, but for a 0-d value under a boolean
    mask without `accumulate` (a ``masked_fill``)."""
    if not isinstance(value, Tensor) or value.dtype is a.dtype:
        return
    keys = index if type(index) is tuple else (index,)
    masks = any(isinstance(k, Tensor) and k.dtype is _dt.bool_ and k.ndim or type(k) is list and k
                and type(k[0]) is bool for k in keys)
    if (value.ndim or accumulate or not masks) and any(
            isinstance(k, (list, np.ndarray)) or isinstance(k, Tensor) and (k.ndim or k.dtype is _dt.bool_)
            for k in keys):
        raise DTypeError(f"index_put: the value's dtype ({value.dtype.name}) must be the indexed tensor's "
                        f"({a.dtype.name}), as PyTorch requires; cast it with value.to({a.dtype.name})")
