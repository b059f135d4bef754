"""Shape primitives (reshape, permute, expand, concat, stack, flip, copy, to_device) and composites.
Views (reshape of contiguous data, permute, expand) share memory and version counter with
their input, as in PyTorch."""
from __future__ import annotations

from operator import methodcaller as _methodcaller, attrgetter as _attrgetter

import numpy as np

from .. import dtypes as _dt
from ..errors import ArgumentError, IndexRangeError, ShapeError
from ..shapes import Sym, data_sized, hint, normalize_dim, numel, specialize_to_agree
from .registry import REGISTRY, Aval, batch_shape, defprim, shift_dims
from .eager import bind, eager_layout, remember_plain, trace_hooks
from .grad_views import pieces, recording
from ..formats import CHANNELS_INNER, CHANNELS_LAST_OF_RANK, all_channels_last, contiguous_format, made_in_order, memory_order
from . import autocast as _autocast
from .shape_params import IDENTITY as _IDENTITY, normalized as _normalized, shape_args as _shape_args, unchanged
from .shape_params import keyword_shape as _keyword_shape, WHOLE_DIM as _WHOLE_DIM
from .shape_params import expand_params as _expand_params, permute_params as _permute_params
from .shape_params import squeeze_params as _squeeze_params, transpose_params as _transpose_params
from .shape_params import unsqueeze_params as _unsqueeze_params

__all__ = ["reshape", "view", "permute", "transpose", "t", "expand", "expand_as", "squeeze",
           "unsqueeze", "flatten", "contiguous", "cat", "concat", "stack", "narrow", "flip",
           "sum_to", "clone", "view_as", "reshape_as",
           "to_device", "swapaxes"]

# numpy's C concatenate without its __array_function__ dispatch (a third of a small call)
_concatenate = getattr(np.concatenate, "_implementation", np.concatenate)
_NDIM = _attrgetter("ndim")


def _resolve_shape(a_shape, shape, op="reshape"):
    shape = list(shape)   # (traced int arguments are Syms where they may be: shape_args)
    total = numel(a_shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {tuple(shape)}")
    known = 1
    for d in shape:
        if not isinstance(d, (int, Sym)):
            raise TypeError(f"{op}: shape entries must be ints, got {d!r}")
        if isinstance(d, int) and d < -1:
            raise ShapeError(f"{op}: invalid shape dimension {d} in {tuple(shape)}")
        if d != -1:
            known = known * d
    if -1 in shape:
        if known == 0:
            raise ShapeError(f"{op}: cannot infer -1 in {tuple(shape)} for a tensor of shape "
                             f"{tuple(a_shape)} with a zero-size dimension")
        rest = total // known
        # (a data-dependent count is checked at run time: host_steps.py)
        if not (data_sized(rest) or rest * known == total
                or specialize_to_agree(hint(rest) * known, total)):
            raise ShapeError(f"{op}: shape {tuple(shape)} is invalid for input of shape "
                             f"{tuple(a_shape)} ({total} elements)")
        shape[shape.index(-1)] = rest
    elif not (data_sized(known) or data_sized(total) or known == total or specialize_to_agree(known, total)):
        raise ShapeError(f"{op}: shape {tuple(shape)} is invalid for input of shape {tuple(a_shape)} "
                         f"({total} elements)")
    return tuple(shape)


def _reshape_vjp(g, out, a, shape):
    d = g._data
    if type(d) is np.ndarray and d.flags.c_contiguous:
        # bound directly: the element counts agree by construction and a C-contiguous array
        # reshapes as a view (reshape()'s normalization costs as much as the op; every
        # view, squeeze and unsqueeze has this backward)
        return (bind(RESHAPE, g, shape=a._data.shape),)
    return (reshape(g, a.shape),)


def _reshape_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): the array's reshape to the
    plan's shape as a C-level callable (no impl frame nor params dict per call: every view,
    squeeze, unsqueeze and flatten, and their backwards, come here)."""
    return _methodcaller("reshape", params["shape"])


RESHAPE = defprim("reshape", lambda xp, a, shape: a.reshape(shape),
                  lambda a, shape: Aval(shape, a.dtype, a.device), _reshape_vjp, kind="shape",
                  save=lambda rq: (), extra={"view": True, "meta": (0,), "fast": _reshape_fast, "batch": batch_shape})


def _permute_rule(a, dims):
    if sorted(dims) != list(range(a.ndim)):
        raise ShapeError(f"permute: dims {dims} are not a permutation of the {a.ndim} dims of "
                         f"shape {a.shape}")
    return Aval(tuple(a.shape[d] for d in dims), a.dtype, a.device)


def _inverse(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return tuple(inv)


# (the array's own method, numpy's or cupy's: np.transpose's Python wrapper costs 0.5 µs, the
# method 0.14; matmul's backward permutes every weight gradient)
def _permute_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): the array's transpose as a C-level
    callable (no Python frame, no params dict per call; a 0-d operand's numpy scalar too)."""
    return _methodcaller("transpose", params["dims"])


PERMUTE = defprim("permute", lambda xp, a, dims: a.transpose(dims), _permute_rule,
                  lambda g, out, a, dims: (permute(g, _inverse(dims)),), kind="shape",
                  save=lambda rq: (), extra={"view": True, "fast": _permute_fast,
                                             "batch": lambda n, p, a: {"dims": (0,) + tuple(d + 1 for d in p["dims"])}})


def _expand_rule(a, shape):
    if len(shape) < a.ndim:
        raise ShapeError(f"expand: cannot expand shape {a.shape} to {shape} (fewer dims)")
    lead = len(shape) - a.ndim
    for i, d in enumerate(a.shape):
        t = shape[lead + i]
        if not (d is t or d == t or (isinstance(d, int) and d == 1)):
            raise ShapeError(f"expand: the expanded size {t} must match the existing size {d} at "
                             f"dim {lead + i} (shape {a.shape} -> {shape}); only size-1 dims expand")
    return Aval(shape, a.dtype, a.device)


def _expand_impl(xp, a, shape):
    if xp is np and a.flags.c_contiguous and a.size:
        # The same read-only view np.broadcast_to makes, without its Python-level checks
        # (which cost more than the rest of a small op): stride 0 on broadcast dims.
        if a.ndim == 0:  # a 0-d value (a full reduction's gradient): every stride 0
            strides = (0,) * len(shape)
        else:
            lead = len(shape) - a.ndim
            strides = tuple([0] * lead + [0 if n == 1 and m != 1 else st
                                          for n, m, st in zip(a.shape, shape[lead:], a.strides)])
        out = np.ndarray(shape, a.dtype, a, 0, strides)
        out.setflags(write=False)  # (half the cost of assigning flags.writeable)
        return out
    return xp.broadcast_to(a, shape)


def _expand_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_expand_impl`'s view with its
    strides made once per plan and C-contiguous operand strides met (a 0-d operand's, every
    ``loss.sum()``'s backward, all 0): numpy's stride tuple costs more than the view."""
    sa, shape = shapes[0], params["shape"]
    if sa is None or 0 in sa:
        return None
    ndarray = np.ndarray
    lead = (0,) * (len(shape) - len(sa))
    broadcast = tuple(n == 1 and m != 1 for n, m in zip(sa, shape[len(lead):]))
    made: dict = {}   # the operand's strides -> the view's

    def expand_view(a):
        st = a.strides
        strides = made.get(st)
        if strides is None:
            if not a.flags.c_contiguous or len(made) > 3:
                return _expand_impl(np, a, shape)
            strides = made[st] = lead + tuple(0 if b else s for b, s in zip(broadcast, st))
        out = ndarray(shape, a.dtype, a, 0, strides)
        out.setflags(write=False)
        return out
    return expand_view


EXPAND = defprim("expand", _expand_impl, _expand_rule,
                 lambda g, out, a, shape: (g,), kind="shape", save=lambda rq: (),
                 # in a fused kernel: a broadcasting read of its operand (compiler/fusion.py)
                 scalar=lambda e, a, shape: a,
                 # (the engine sums g back to a's shape)
                 extra={"view": True, "broadcast_read": True, "fast": _expand_fast, "batch": batch_shape})


def _concat_rule(*avals, dim):
    first = avals[0]
    size = 0
    for k, a in enumerate(avals):
        if a.ndim != first.ndim:
            raise ShapeError(f"cat: tensors must have the same rank, got shapes "
                             f"{[x.shape for x in avals]}")
        for i in range(a.ndim):
            if i != dim and not (a.shape[i] == first.shape[i]):
                raise ShapeError(f"cat: sizes must match except in dim {dim}, got shapes "
                                 f"{[x.shape for x in avals]}: tensor {k} has size {a.shape[i]} at "
                                 f"dim {i}, tensor 0 has {first.shape[i]}")
        size = size + a.shape[dim]
    shape = list(first.shape)
    shape[dim] = size
    return Aval(tuple(shape), first.dtype, first.device)


def _concat_vjp(g, out, *inputs, dim):
    # each input's slice of g, bound as `narrow` binds it without narrow's checks: the
    # ranges are in g by construction (a loss made by cat of 50 per-step terms: 50 slices)
    if not recording(g):   # (g's slices as views, no getitem bind each)
        return pieces(g, dim, [a._data.shape[dim] for a in inputs])
    getitem = _GETITEM or _getitem_prim()
    lead = _WHOLE_DIM * dim
    grads = []
    start = 0
    for a in inputs:
        d = a._data
        n = d.shape[dim] if type(d) is np.ndarray else a.shape[dim]
        grads.append(bind(getitem, g, spec=lead + (("s", start, start + n, None),)))
        start = start + n
    return tuple(grads)


def _concat_impl(xp, *arrs, dim):
    # numpy lays its result out in the inputs' stride order: strided inputs (permuted
    # views) would give a non-contiguous result that the next reshape copies again; written
    # C-contiguous instead at the same cost.
    if xp is np and not all(a.flags.c_contiguous for a in arrs):
        shape = list(arrs[0].shape)
        shape[dim] = sum(a.shape[dim] for a in arrs)
        out = np.empty(shape, np.result_type(*arrs))
        return np.concatenate(arrs, axis=dim, out=out)
    return xp.concatenate(arrs, axis=dim)


def _concat_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_concat_impl`'s C-contiguous result,
    its shape worked out once per signature, not per call."""
    if None in shapes:
        return None
    dim = params["dim"]

    def fast(*arrs):   # (C-contiguous inputs, nearly every call: a C-contiguous result as it is)
        for a in arrs:
            if not a.flags.c_contiguous:
                return _concat_impl(np, *arrs, dim=dim)
        return _concatenate(arrs, dim)
    return fast


CONCAT = defprim("concat", _concat_impl, _concat_rule,
                 _concat_vjp, kind="shape", promote=True, save=lambda rq: (),
                 extra={"meta": lambda rq: range(len(rq)), "fast": _concat_fast, "batch": shift_dims})


def _stack_rule(*avals, dim):
    first = avals[0]
    for k, a in enumerate(avals):
        if a.ndim != first.ndim or not all(x == y for x, y in zip(a.shape, first.shape)):
            raise ShapeError(f"stack: expects each tensor to be equal size, got shapes "
                             f"{[tuple(x.shape) for x in avals]}: tensor {k} differs from tensor 0")
    shape = first.shape[:dim] + (len(avals),) + first.shape[dim:]
    return Aval(shape, first.dtype, first.device)


# One primitive rather than an unsqueeze per input and a concat: eager's per-call cost is
# one dispatch (four small inputs: 28.7 us as the composition).
def _stack_impl(xp, *arrs, dim):
    """numpy's stack, C-contiguous as PyTorch's whatever the inputs' strides (`_concat_impl`)."""
    return _concat_impl(xp, *[xp.expand_dims(a, dim) for a in arrs], dim=dim)


def _stack_fast(shapes, dtype, params):
    """The plan's numpy call: for C-contiguous inputs numpy's stack less its checks, as a
    concatenate along `dim` viewed with the new axis split off (the same elements in the
    same order); `_stack_impl` for others."""
    dim, first = params["dim"], shapes[0]
    if first is None:
        return None
    shape = first[:dim] + (len(shapes),) + first[dim:]
    last = dim == len(first)   # (a new last axis: nothing to split)

    def fast(*arrs):
        for a in arrs:
            if not a.flags.c_contiguous:
                return _stack_impl(np, *arrs, dim=dim)
        return _concatenate([a.reshape(first + (1,)) for a in arrs], dim) if last else \
            _concatenate(arrs, dim).reshape(shape)
    return fast


def _slices_along(a, dim: int) -> tuple:
    """`a`'s slices along `dim`, each its own differentiable getitem (stack's VJP while a
    graph is recorded)."""
    d = normalize_dim(dim, a.ndim, "unbind")
    return tuple(a[(slice(None),) * d + (i,)] for i in range(int(a.shape[d])))


STACK = defprim("stack", _stack_impl, _stack_rule,
                lambda g, out, *inputs, dim: _slices_along(g, dim) if recording(g) else
                pieces(g, dim, [None] * len(inputs)),
                kind="shape", promote=True,
                save=lambda rq: (), extra={"meta": lambda rq: range(len(rq)), "fast": _stack_fast,
                                            "batch": lambda n, p, *a: {"dim": p["dim"] % (a[0].ndim + 1) + 1}})

# A copy, as PyTorch's flip: numpy's is a view, and ``x.flip(0).add_(1)`` changed x.
FLIP = defprim("flip", lambda xp, a, dims: xp.flip(a, axis=dims).copy(),
               lambda a, dims: Aval(a.shape, a.dtype, a.device),
               lambda g, out, a, dims: (flip(g, dims),), kind="shape", save=lambda rq: (), extra={"batch": shift_dims})

# (the plan's call: numpy's C copy as the array's own method, not for a 0-d numpy scalar)
COPY = defprim("copy", lambda xp, a: xp.array(a, copy=True, order="C"),
               lambda a: Aval(a.shape, a.dtype, a.device),
               lambda g, out, a: (g,), kind="elementwise", scalar=lambda e, a: a, save=lambda rq: (),
               extra={"fast": lambda shapes, dtype, params: np.ndarray.copy if shapes[0] else None})


def _to_device_impl(xp, a, device):
    from ..device import array_module
    if device.type == "cpu":
        return a.get() if hasattr(a, "get") else a
    cp = array_module(device)
    with cp.cuda.Device(device.index):
        return cp.asarray(a)


TO_DEVICE = defprim("to_device", _to_device_impl,
                    lambda a, device: Aval(a.shape, a.dtype, device),
                    lambda g, out, a, device: (to_device(g, a.device),), kind="other",
                    save=lambda rq: (), extra={"meta": (0,)})


# ---------------------------------------------------------------- public functions
def _reshape_params(a, shape):
    shape = _resolve_shape(a.shape, _shape_args(shape))
    return _IDENTITY if unchanged(shape, a.shape) else shape


def reshape(a, *shape_, shape=None):
    if shape is not None:
        shape_ = _keyword_shape("reshape", "shape", shape_, shape)
    shape = _normalized(_reshape_params, a, shape_)
    if shape is _IDENTITY:
        return _whole_view(a)
    data = a._data
    if type(data) is np.ndarray and not data.flags.c_contiguous and not _viewable(data, shape):
        # the copy first, then a view of it: numpy's reshape would copy inside a "view"
        # op, and an in-place write to the result would be taken for one into `a`
        a = bind(COPY, a)
    out = bind(RESHAPE, a, shape=shape)
    if data is None and trace_hooks.eager_layout is not None:
        data = eager_layout(a)   # (a tracer: the strides it would have eagerly)
        if data is not None and not data.flags.c_contiguous and not _viewable(data, shape):
            trace_hooks.alias(out, None, a)   # eagerly a copy: no view of `a`
    return out


def _whole_view(a):
    """A new view of all of `a`, never `a` (as PyTorch's): its ``unsqueeze_`` keeps `a`'s shape."""
    d = a._data
    return bind(RESHAPE, a, shape=d.shape if type(d) is np.ndarray else tuple(a.shape))


def _viewable(data: np.ndarray, shape) -> bool:
    """Whether numpy can reshape `data` to `shape` without copying."""
    try:
        data.reshape(shape, copy=False)
    except ValueError:
        return False
    return True


def view(a, *shape, size=None):
    """``reshape`` that must not copy: a view whose strides cannot express the new shape
    (a transposed or sliced tensor) raises, as in PyTorch, instead of copying silently
    (writes through the copy would be lost)."""
    if size is not None:
        shape = _keyword_shape("view", "size", shape, size)
    new = _normalized(_reshape_params, a, shape)   # (reshape's own normalization, kept)
    if new is _IDENTITY:
        return _whole_view(a)
    data = eager_layout(a)   # (a tracer: the strides it would have eagerly)
    if data is None and a._data is None:   # (specializes the symbolic sizes a merge of dims needs)
        trace_hooks.eager_layout(a, exact=True, view_to=new)
    # (a C-contiguous array takes any shape of its size as a view: only others are tried)
    if isinstance(data, np.ndarray) and not data.flags.c_contiguous and not _viewable(data, new):
        raise ShapeError(f"view: shape {new} is not compatible with the input's size and strides "
                         f"(shape {tuple(a.shape)}, strides {tuple(data.strides)} bytes: a transposed, "
                         f"sliced or expanded tensor); use .reshape(...), which copies when it must, "
                         f"or .contiguous().view(...)")
    return bind(RESHAPE, a, shape=new)


def view_as(a, other):
    return view(a, other.shape)


def reshape_as(a, other):
    return reshape(a, other.shape)


def permute(a, *dims_, dims=None):
    if dims is not None:
        dims_ = _keyword_shape("permute", "dims", dims_, dims)
    dims = _normalized(_permute_params, a, dims_)
    if dims is _IDENTITY:
        return _whole_view(a)
    return bind(PERMUTE, a, dims=dims)


def transpose(a, dim0: int, dim1: int):
    dims = _normalized(_transpose_params, a, (dim0, dim1))
    if dims is _IDENTITY:
        return _whole_view(a)
    return bind(PERMUTE, a, dims=dims)


swapaxes = transpose
_SWAP = remember_plain((1, 0))   # transpose(a, 0, 1)'s dims for any matrix (t()), known plain to bind


def t(a):
    if a.ndim > 2:
        raise ShapeError(f"t() expects a tensor with <= 2 dims, got shape {tuple(a.shape)}; use transpose")
    return _whole_view(a) if a.ndim < 2 else bind(PERMUTE, a, dims=_SWAP)


def expand(a, *shape, size=None):
    if size is not None:
        shape = _keyword_shape("expand", "size", shape, size)
    shape = _normalized(_expand_params, a, shape)
    if shape is _IDENTITY:
        return _whole_view(a)
    return bind(EXPAND, a, shape=shape)


broadcast_to = expand


def expand_as(a, other):
    return expand(a, other.shape)


def squeeze(a, dim=None, axis=None):
    dim = dim if axis is None else axis
    dims = tuple(range(a.ndim)) if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    shape = _normalized(_squeeze_params, a, dims)   # (kept per shape and dims, as unsqueeze's)
    return _whole_view(a) if shape is _IDENTITY else (
        bind(RESHAPE, a, shape=shape) if type(a._data) is np.ndarray else reshape(a, shape))


def unsqueeze(a, dim: int = None, axis=None):
    if axis is not None:
        dim = axis
    if type(a._data) is np.ndarray and type(dim) is int:
        # (the new shape kept per (shape, dim): what reshape's own normalization gives it)
        return bind(RESHAPE, a, shape=_normalized(_unsqueeze_params, a, (dim,)))
    return reshape(a, _unsqueeze_params(a, (dim,)))


def flatten(a, start_dim: int = 0, end_dim: int = -1):
    if a.ndim == 0:
        return reshape(a, (1,))
    s, e = (normalize_dim(d, a.ndim, "flatten") for d in (start_dim, end_dim))
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    if s == e and hasattr(a, "_data"):   # (not a tensor: refused by reshape below)
        return a    # (as PyTorch's flatten: the input itself, not a view)
    d = a._data
    # (the array's shape where there is one: slices of a Size are Sizes, made in Python)
    shape = d.shape if type(d) is np.ndarray else tuple(a.shape)
    return reshape(a, shape[:s] + (numel(shape[s:e + 1]),) + shape[e + 1:])


def contiguous(a):
    if a._data is not None and a.is_contiguous():
        return a
    out = bind(COPY, a)
    if a._data is None and a.is_contiguous():
        # A traced tensor that is contiguous eagerly: the copy stays in the graph (the plan
        # may lay it out strided), but it is `a` as eagerly, so writes through either reach both.
        trace_hooks.alias(out, COPY, a)
    return out


def clone(a, *, memory_format=None):
    """A copy in new memory laid out by `memory_format` (by default in a's dim order)."""
    if memory_format is None and a._data is not None and a._data.flags.c_contiguous:
        return bind(COPY, a)   # (the usual case, without asking for the order: 2x faster)
    order = memory_order(a, memory_format, "clone")
    return bind(COPY, a) if order is None else made_in_order(lambda _: bind(COPY, permute(a, order)), a.shape, order)


@_autocast.promote
def cat(tensors, dim: int = 0, axis=None):
    # (`axis`: numpy's name for dim, which PyTorch takes by keyword; not keyword-only, as
    # that would cost every call the interpreter's fast path for simple signatures)
    dim = dim if axis is None else axis
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    ranks = list(map(_NDIM, tensors))   # (no Python frame: a generator's cost a third of a small cat)
    nd = max(ranks)
    if nd == 0:
        raise ShapeError("cat: zero-dimensional tensors cannot be concatenated; use stack")
    d = normalize_dim(dim, nd, "cat")
    # PyTorch's legacy rule: 1-D empty tensors are skipped whatever the others' rank.
    kept = tensors if nd == 1 or 1 not in ranks else [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)]
    if not kept:
        kept = tensors[:1]
    if len(kept) == 1:
        # Still a new tensor (never the input itself), in the promoted dtype.
        from .elementwise import cast
        last = nd in CHANNELS_INNER and all_channels_last(kept, eager_layout)   # (else row-major, as PyTorch's)
        out = clone(kept[0], memory_format=CHANNELS_LAST_OF_RANK[nd] if last else contiguous_format)
        dt = _dt.result_type([x.dtype for x in tensors if x.ndim], [], [x.dtype for x in tensors if not x.ndim])
        return cast(out, dt)
    if nd in CHANNELS_INNER and all_channels_last(kept, eager_layout):
        # PyTorch's result keeps the inputs' common format: the channels-innermost views
        # concatenated, viewed back in (N, C, ...) order
        inner, back = CHANNELS_INNER[nd]
        return permute(bind(CONCAT, *[permute(x, inner) for x in kept], dim=inner.index(d)), back)
    return bind(CONCAT, *kept, dim=d)


concat = concatenate = cat


@_autocast.promote
def stack(tensors, dim: int = 0, axis=None):
    dim = dim if axis is None else axis
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    d = normalize_dim(dim, tensors[0].ndim + 1, "stack")
    return bind(STACK, *tensors, dim=d)   # (STACK's rule checks the shapes agree)


_GETITEM = None   # ops/indexing's GETITEM (indexing imports this module): read at first use


def _getitem_prim():
    global _GETITEM
    if _GETITEM is None:
        _GETITEM = REGISTRY["getitem"]
    return _GETITEM


def narrow(a, dim: int, start: int, length: int):
    d = normalize_dim(dim, a.ndim, "narrow")
    n = a.shape[d]
    if getattr(length, "_trace", None) is not None:   # a traced int argument: maybe a Sym
        length = trace_hooks.size_of(length)
    if type(start) is not int and getattr(start, "_trace", None) is not None:   # (a Sym is >= 2)
        start = trace_hooks.size_of(start)
    if isinstance(start, (int, Sym)):   # (a symbolic size compares under a guard: checked every call)
        if isinstance(start, int) and (start < 0 or isinstance(n, int)) and not -n <= start <= n:
            raise IndexRangeError(f"narrow: start {start} is out of range for dim {dim} of size {n}")
        if isinstance(start, int) and start < 0:
            start += n  # a negative start counts from the end, as in PyTorch
        rest = n - start - length   # (a symbolic one: rest >= 0 guarded for every call served)
        if not (isinstance(rest, Sym) and trace_hooks.assume_nonnegative(rest, "narrow")) \
                and (length < 0 or rest < 0):
            raise IndexRangeError(f"narrow: start ({start}) + length ({length}) exceeds dim {dim} of size {n}")
    # the spec getitem would make of the slices, made here: normalizing them cost more
    # than the view (a chunk of LSTM gates: 38 us a piece, 20 of them in getitem's checks)
    spec = _WHOLE_DIM * d + (("s", start, start + length, None),)
    return bind(_GETITEM or _getitem_prim(), a, spec=spec)


def flip(a, dims):
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    dims = tuple(normalize_dim(d, a.ndim, "flip") for d in dims)
    if len(set(dims)) < len(dims):
        raise ArgumentError(f"flip: dims {dims} name a dim more than once")
    return bind(FLIP, a, dims=dims) if a.ndim else clone(a)


_SUM = None  # ops/reductions' SUM (reductions imports this module): read at sum_to's first use


def sum_to(g, shape):
    """Sum `g` over broadcast dims so it has `shape` (the central broadcast-gradient rule)."""
    global _SUM
    shape = tuple(shape)
    dims, same = _normalized(_sum_to_steps, g, shape)   # (kept per pair of shapes)
    if dims:
        if _SUM is None:  # (then kept: an import statement per call cost 0.4 µs)
            _SUM = REGISTRY["sum"]
        # SUM and RESHAPE bound directly: the dims are valid and the element counts agree by
        # construction (sum()'s and reshape()'s argument checks cost as much as the ops)
        g = bind(_SUM, g, dims=dims, keepdim=True)
    return g if same else bind(RESHAPE, g, shape=shape)


def _sum_to_steps(g, shape) -> tuple:
    """(the dims `sum_to` sums with keepdim, whether that leaves `shape` already)."""
    gshape = g.shape
    lead = len(gshape) - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if isinstance(d, int) and d == 1
                                      and not (isinstance(gshape[lead + i], int) and gshape[lead + i] == 1))
    return dims, shape == tuple(1 if i in dims else n for i, n in enumerate(gshape))


def to_device(a, device):
    return a if a.device == device else bind(TO_DEVICE, a, device=device)
