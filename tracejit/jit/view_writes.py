"""In-place writes through views inside a captured function.

Eagerly a view (``x[0]``, ``x.t()``, ``buf[1:]``) shares memory with its base, so
``x[0].mul_(2)`` changes ``x``. A trace has no memory: each view remembers its base and
the chain of view ops that made it from the base, and a write through the view becomes an
out-of-place scatter of the new values into the base at the positions the view covers.
The positions come from running the same view ops eagerly on ``arange(base.numel())``:
one definition of every view op, and any chain of them works. A view whose base changed
since it was taken is re-derived from the base when it is next read, as eagerly it would
show the new values. A write through ``x.detach()`` (or ``x.data``) changes ``x``'s values
but not its gradient, as eagerly: ``x`` takes the new values with the identity as their
gradient (`DETACHED_WRITE`). A shape change in place (``y.unsqueeze_(0)``, ``y.t_()``)
rebinds a value of the function's own; an argument's or a viewed value's raises
(`reshape_in_place`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import TraceError, user_where
from ..formats import channels_innermost
from ..ops import eager as _eager
from ..ops.creation import arange as _arange
from ..ops.registry import Aval, defprim
from ..ops.shape import COPY as _COPY, EXPAND as _EXPAND, PERMUTE as _PERMUTE
from ..tensor import Tensor
from ..shapes import Sym, contains_sym
from . import tracer as _tracer   # (tracer.py imports this module: its names are read at run time)

__all__ = ["view_source", "write_through", "refresh", "eager_layout", "alias", "same_value", "replay",
           "returned_argument", "reshape_in_place"]


# ``detached_write(base, new)``: the values of `new`, the gradient of `base` (a write
# through a detached view changes the data, not the autograd history, as eagerly)
DETACHED_WRITE = defprim("detached_write", lambda xp, base, new: new,
                         lambda base, new: Aval(base.shape, base.dtype, base.device),
                         lambda g, out, base, new: (g, None), kind="elementwise",
                         scalar=lambda e, base, new: new, save=lambda rq: (), nondiff=(1,))


def view_source(trace, prim, args, params):
    """`_view_src` for the result of view op `prim` on `args`: (base, the base's value
    now, the chain of (prim, other args, params) from the base), or None. The chain is
    None when it cannot be replayed (a tensor operand besides the viewed one, or a
    captured tensor viewed inside a branch or loop body); a write then raises."""
    src = args[0]
    if not isinstance(src, Tensor) or any(isinstance(a, Tensor) for a in args[1:]):
        chain_step = None
    else:
        chain_step = ((prim, tuple(args[1:]), dict(params)),)
    if isinstance(src, _tracer.Tracer) and src._view_src is not None:
        base, _, chain = src._view_src
        chain = None if chain is None or chain_step is None else chain + chain_step
    elif isinstance(src, _tracer.Tracer):
        base, chain = src, chain_step
    elif isinstance(src, Tensor):
        base, chain = src, (chain_step if trace.parent is None else None)
    else:
        return None
    if isinstance(base, _tracer.Tracer):
        base._trace._root().viewed[id(base)] = base
    return base, value_of(trace, base), chain


def value_of(trace, base):
    """The IR value `base` holds now (a tracer's var, or a captured tensor's latest write)."""
    if isinstance(base, _tracer.Tracer):
        return base._var
    root = trace._root()
    written = root.buffer_writes.get(id(base))
    return written[1] if written is not None else root.consts.get(id(base))


def _positions(base, chain) -> np.ndarray:
    """Flat positions in `base` (of static shape) of the elements the view `chain`
    selects, by running the chain eagerly on ``arange(numel).reshape(base.shape)``; None
    if the view repeats an element (the write would be ambiguous)."""
    v = Tensor(np.arange(math.prod(base.shape), dtype=np.int64).reshape(tuple(base.shape)),
               dtype=_dt.int64)
    pos = np.array(_replay_eagerly(v, chain)._data, dtype=np.int64).reshape(-1)
    # a mark per base element, not np.unique: linear, where unique's sort or hash took
    # seconds on views of a few million elements
    hit = np.zeros(v.numel(), dtype=np.bool_)
    hit[pos] = True
    if np.count_nonzero(hit) != pos.size:
        return None
    return pos


def returned_argument(ctx, t):
    """("input", i, view ops) when `t`, returned by the function, is its argument i written
    in place, or a view of it its view ops make again; ("state", buffer, view ops) for a
    captured tensor (a module's buffer) written in place: a call returns that tensor (that
    view of it), as eagerly; else None."""
    src = getattr(t, "_view_src", None)
    base, chain = (t, ()) if src is None else (src[0], src[2])
    if chain is None:
        return None
    kept = tuple(step for step in chain if step[0] is not _COPY)   # (contiguous(): the tensor)
    i = ctx.tensor_leaves.get(id(base))
    if i is not None and base._var in ctx.tensor_leaves and (kept or kept == chain):
        return None   # (not written: the executor returns it or its view; only contiguous() of it here)
    chain = kept
    if i is None:
        return ("state", base, chain) if id(base) in ctx._root().buffer_writes and base._data is not None else None
    return ("input", i, chain)


def _stale_view(t, prim_name: str) -> None:
    where = user_where(4)
    raise TraceError(
        f"{prim_name}{where}: a view (x[0], x.t(), x.view(...), x.reshape(...)) is used after the "
        f"tensor it views was modified in place; eagerly the view would show the new values, "
        f"which a compiled function cannot track. Take the view after the in-place op, or use "
        f"out-of-place ops (x = x + 1).")


def replay(v, chain):
    """`chain`'s view ops (a view's ``_view_src[2]``) applied to `v` eagerly."""
    for prim, rest, params in chain:
        v = _eager.bind(prim, v, *rest, **params)
    return v


def _replay_eagerly(v, chain):
    """`replay` with no trace active: the chain's ops run on `v`'s numbers."""
    saved = _eager.trace_state.tracer
    _eager.trace_state.tracer = None
    try:
        return replay(v, chain)
    finally:
        _eager.trace_state.tracer = saved


def _base_chain(t) -> tuple:
    """(the tensor tracer `t` views, the view ops from it), or (t, ()) for no view of one."""
    src = getattr(t, "_view_src", None)
    return (t, ()) if src is None or src[2] is None else (src[0], src[2])


def eager_layout(t, exact: bool = False, view_to=None):
    """A numpy array of tracer `t`'s shape with the strides `t` would have eagerly (its
    items never read: `view`, `is_contiguous` and `stride` ask it), or None
    when a size is symbolic. A view's comes from replaying its view ops on its base: a
    captured tensor's or an argument's own memory, or untouched row-major memory for a
    value of the graph. `exact`: a view by a symbolic bound specializes it (the capture
    runs again with it static), for an answer that depends on it (`is_contiguous`); with
    `view_to`, a shape ``view`` asks for, so do a symbolic-sized base's sizes, unless that
    shape only splits dims (a view of any strides)."""
    if view_to is not None and _splits_only(tuple(t.shape), view_to):
        return None
    src = getattr(t, "_view_src", None)
    if view_to is not None and src is not None and src[2] and src[2][-1][0] is _COPY:
        return None   # (``.contiguous()``'s result: row-major, a view of any shape)
    base, chain = _base_chain(t)
    if not all(isinstance(d, int) for d in base.shape):
        arr = _argument_layout(base) if isinstance(base, _tracer.Tracer) else None
        if arr is not None and not arr.flags.c_contiguous or view_to is not None and chain:
            # Its strides follow its sizes (a view's too): the capture runs again with this
            # argument's sizes static, and its layout then answers (and is guarded) exactly.
            for d in base.shape:
                if not isinstance(d, int):
                    d._specialized()
        return None   # (a row-major argument: guarded to stay one, whatever its sizes)
    arr = _argument_layout(base) if isinstance(base, _tracer.Tracer) else None
    if arr is None:
        own = not isinstance(base, _tracer.Tracer) and isinstance(base._data, np.ndarray)
        # (a value of the graph: memory allocated, never touched)
        arr = base._data if own else np.empty(tuple(base.shape), base.dtype.np)
    if not chain:
        return arr
    bounds = [p for _, rest, params in chain for p in (*rest, *params.values()) if contains_sym(p)]
    if bounds:   # (a view by a symbolic bound, ``z[:, :t + 1]``: as a symbolic base's)
        for s in (_syms(bounds) if exact else ()):
            s._specialized()
        return None
    try:
        return _replay_eagerly(Tensor._wrap(arr, base.dtype), chain)._data
    except Exception:   # (a chain numpy cannot replay on these items: no answer)
        return None


def contiguous_answer(t, arr, memory_format) -> bool:
    """Tracer `t`'s ``is_contiguous()`` from its eager layout `arr`; where that is unknown (a
    symbolic size), a view made only by permutes of a row-major base (any other view taken
    as one) is dense in `memory_format` when, walked in that format's order, its dims of size
    above 1 keep the base's order (a symbol stands for a size of 2 or more)."""
    if arr is not None:
        return Tensor.is_contiguous(Tensor._wrap(arr, t.dtype), memory_format)
    base, chain = _base_chain(t)
    order = list(range(t.ndim))   # the base dim each of t's dims is
    if chain and all(prim is _PERMUTE for prim, _, _ in chain):
        for _, _, params in chain:
            order = [order[d] for d in params["dims"]]
    elif chain:
        # another view (``x[:, :2]``, ``x[..., :-1, :]``): its layout at this call's sizes, the
        # base row-major (guarded so); a slice clamped at a dim's end is guarded there
        arr = _at_hints_layout(base, chain)
        if arr is not None:
            return Tensor.is_contiguous(Tensor._wrap(arr, t.dtype), memory_format)
    if memory_format is None or memory_format.name in ("contiguous_format", "preserve_format"):
        walk = range(t.ndim)
    else:
        walk = channels_innermost(memory_format, t.ndim)
        if walk is None:
            return False
        walk = walk[::-1]
    kept = [order[d] for d in walk if not (isinstance(t.shape[d], int) and t.shape[d] == 1)]
    return kept == sorted(kept)


def eager_pair(a, b):
    """Arrays over one memory with the strides tracers `a` and `b` would have eagerly, where
    both are views (or one the base) of one value; else None. An in-place op asks it of its
    written tensor and an operand (tensor_inplace.refuse_partial_overlap). Symbolic sizes
    and bounds take the values of the call being captured: an overlap found raises as that
    call would eagerly (one found only at other sizes is not)."""
    (ba, ca), (bb, cb) = _base_chain(a), _base_chain(b)
    if ba is not bb or not (ca or cb):
        return None
    arr = Tensor._wrap(np.empty(_at_hints(tuple(ba.shape)), ba.dtype.np), ba.dtype)
    ca, cb = [tuple((prim, _at_hints(rest), {k: _at_hints(v) for k, v in params.items()})
                    for prim, rest, params in c) for c in (ca, cb)]
    try:
        return _replay_eagerly(arr, ca)._data, _replay_eagerly(arr, cb)._data
    except Exception:   # (a chain numpy cannot replay: no answer)
        return None


def _at_hints_layout(base, chain):
    """The array view `chain` makes of row-major memory of `base`'s shape, symbolic sizes
    and bounds at this call's values, or None where numpy cannot replay it."""
    arr = Tensor._wrap(np.empty(_at_hints(tuple(base.shape)), base.dtype.np), base.dtype)
    chain = tuple((prim, _at_hints(rest), {k: _at_hints(v) for k, v in params.items()})
                  for prim, rest, params in chain)
    try:
        return _replay_eagerly(arr, chain)._data
    except Exception:   # (a chain numpy cannot replay: no answer)
        return None


def _at_hints(v):
    """Param value `v` (nested tuples, lists, slices) with each Sym replaced by its hint."""
    if isinstance(v, (tuple, list)):
        return type(v)(_at_hints(x) for x in v)
    if isinstance(v, slice):
        return slice(_at_hints(v.start), _at_hints(v.stop), _at_hints(v.step))
    return v.hint if isinstance(v, Sym) else v


def _splits_only(old: tuple, new: tuple) -> bool:
    """Whether shape `new` only splits dims of `old` (or adds or drops dims of size 1): a
    view of any strides, which a symbolic size need not be specialized to decide."""
    i = 0
    for d in old:
        p = 1
        while not _same_dim(p, d):
            if i == len(new):
                return False
            p, i = p * new[i], i + 1
    return all(_same_dim(n, 1) for n in new[i:])


def _same_dim(a, b) -> bool:
    """Whether dims `a` and `b` are the same for every size (a symbolic size is never
    specialized to decide: a data-dependent one cannot be)."""
    if isinstance(a, Sym) or isinstance(b, Sym):
        return isinstance(a, Sym) and isinstance(b, Sym) and a.terms == b.terms
    return a == b


def _syms(v) -> list:
    """The Syms in `v`, a param value or a nested tuple or list of them."""
    if isinstance(v, (tuple, list)):
        return [s for x in v for s in _syms(x)]
    return [v] if isinstance(v, Sym) else []


def _argument_layout(t):
    """The array of the call being captured that tracer `t` stands for, when `t` is a tensor
    argument of the function, with its layout made a guard of the capture (a call whose
    argument is laid out otherwise captures again); None for other tracers."""
    root = t._trace._root()
    k = argument_index(root, t) if t._trace is root else None
    if k is None or root.leaves is None or not isinstance(root.leaves[k]._data, np.ndarray):
        return None
    from .scalars import layout, note
    data = root.leaves[k]._data
    note(root.decisions, ("layout", k), "value", layout(data), "the argument's layout", same_kind=False)
    return data


def argument_index(root, t):
    """The leaf index of the call's tensor that tracer `t` stands for (its memory, also
    after in-place writes rebound its value), or None."""
    leaves = getattr(root, "tensor_leaves", {})   # (keyed by the input's var and by id(tracer))
    k = leaves.get(t._var)
    return leaves.get(id(t)) if k is None else k


def write_through(trace, target, res, what: str) -> bool:
    """Write `res` (an IR value, target's shape and dtype) through the view `target` into
    its base; False when that is not possible (the caller raises)."""
    base, seen, chain = target._view_src
    if chain is None or any(prim.kind == "complex" for prim, _, _ in chain):
        return False   # (z.real, z.conj(): views whose elements are not the base's)
    if isinstance(base, _tracer.Tracer) and (base._trace is not trace
                                             or base._view_src is not None):
        return False
    if not isinstance(base, _tracer.Tracer) and trace.parent is not None:
        return False
    if all(isinstance(d, int) for d in base.shape):
        pos = _positions(base, chain)
        if pos is None:
            return False
    elif any(prim is _EXPAND for prim, _, _ in chain):
        return False   # (eagerly an expanded view is read-only memory)
    else:
        pos = None     # dynamic sizes: the positions are computed in the graph
    refresh(trace, target)
    new_vals = _tracer._make_tracer(res, trace).reshape(-1)
    if new_vals.dtype is not base.dtype:
        new_vals = new_vals.to(base.dtype)
    n = math.prod(base.shape)
    if pos is None:
        idx = replay(_arange(n, dtype=_dt.int64).reshape(tuple(base.shape)), chain).reshape(-1)
        flat = base.reshape(-1).index_put((idx,), new_vals)
    elif pos.size == n and np.array_equal(pos, np.arange(n)):
        flat = new_vals                      # a reshape of the whole base
    elif pos.size == n:                      # a permutation of it (x.t(), x.permute(...))
        flat = new_vals.index_select(0, Tensor(np.argsort(pos), dtype=_dt.int64))
    else:
        flat = base.reshape(-1).index_put((Tensor(pos, dtype=_dt.int64),), new_vals)
    flat = flat.reshape(tuple(base.shape))
    if any(prim is _tracer.DETACH for prim, _, _ in chain):
        flat = _eager.bind(DETACHED_WRITE, base, flat)
    else:
        base._check_inplace(what)   # (a view of a leaf that requires grad: refused, as eagerly)
    trace.assign(base, flat, what)
    target._var = res
    target._view_src = (base, value_of(trace, base), chain)
    return True


def refresh(trace, view) -> None:
    """Re-derive a view whose base changed since it was taken by replaying its view ops
    on the base's value now; raises the stale-view error when it cannot be replayed."""
    base, seen, chain = view._view_src
    now = value_of(trace, base)
    if now is seen:
        return
    if chain is None:
        _stale_view(view, "op")
    view._view_src = None
    v = replay(base, chain)
    view._var = v._var
    view._view_src = (base, value_of(trace, base), chain)


def alias(out, prim, a) -> None:
    """Make tracer `out` (``prim(a)``, of a's shape and values) a view of `a`: an op that
    returns its operand itself eagerly but keeps a node in the graph. With `prim` None,
    make it no view: a view op that copies eagerly (a reshape numpy cannot view)."""
    if not isinstance(out, _tracer.Tracer):
        return
    if prim is None:
        out._view_src = None
    elif getattr(a, "_trace", None) is out._trace:   # (not a value from outside a branch body)
        out._view_src = view_source(out._trace, prim, (a,), {})


def same_value(a, b) -> bool:
    """Whether tracers `a` and `b` hold the same value: one var, or vars of two equations of
    one trace with the same primitive, operands and params (``b > 0`` written twice)."""
    from .ir import Literal
    Tracer = _tracer.Tracer
    if not (isinstance(a, Tracer) and isinstance(b, Tracer)) or a._trace is not b._trace:
        return False
    if a._var is b._var:
        return True
    found = {}
    for e in reversed(a._trace.eqns):
        for v in (a._var, b._var):
            if v in e.outs and len(e.outs) == 1:
                found[v] = e
        if len(found) == 2:
            break
    if len(found) != 2:
        return False
    ea, eb = found[a._var], found[b._var]
    same_in = len(ea.inputs) == len(eb.inputs) and all(
        x is y or (isinstance(x, Literal) and isinstance(y, Literal) and type(x.value) is type(y.value)
                   and x.value == y.value) for x, y in zip(ea.inputs, eb.inputs))
    return ea.prim is eb.prim and same_in and ea.params == eb.params and ea.prim.kind != "random"


_eager.trace_hooks.eager_layout = staticmethod(eager_layout)
_eager.trace_hooks.eager_pair = staticmethod(eager_pair)
_eager.trace_hooks.same_value = staticmethod(same_value)
_eager.trace_hooks.alias = staticmethod(alias)


def reshape_in_place(trace, target, make, what: str):
    """``target.<op>_()`` for a shape-changing op (unsqueeze_, t_, transpose_, as_strided_,
    resize_) under tracing, `make()` giving the out-of-place result: `target` takes its
    shape and value. Eagerly the op changes the tensor object itself, which a capture can
    do only for a value of the function's own that no other view shares memory with: an
    argument's or captured tensor's new shape cannot reach the caller, and a view taken
    earlier would be re-derived in the new layout. Those raise, naming the op."""
    root = trace._root()
    viewed = isinstance(target, _tracer.Tracer) and id(target) in root.viewed
    out = make()
    if not viewed:
        root.viewed.pop(id(target), None)   # (`out`, a view of target, takes its place)
    if _unchanged(target, out):   # (squeeze_ of a tensor with no size-1 dim)
        return target
    if not isinstance(target, _tracer.Tracer) or target._trace is not trace:
        whose = "a tensor from outside the compiled function (or this branch or loop body)"
    elif target._trace is root and argument_index(root, target) is not None:
        whose = "an argument of the compiled function (its new shape cannot reach the caller)"
    elif viewed:
        whose = "a tensor another view shares memory with"
    else:
        target._var = out._var
        src = out._view_src
        # (a value of its own is no view; a view stays one, of the same base, by one more op)
        target._view_src = None if src is None or src[0] is target else src
        return target
    where = user_where(3)
    raise TraceError(f"{what}{where}: changing the shape of {whose} in place is not supported inside "
                     f"a compiled function; use the out-of-place op instead (x = x.{what[:-1]}(...))")


def _unchanged(target, out) -> bool:
    """Whether view `out` of `target` shows target's elements in target's shape and order."""
    if out is target:
        return True
    src = out._view_src
    if src is None or src[2] is None or tuple(out.shape) != tuple(target.shape) \
            or not all(isinstance(d, int) for d in target.shape):
        return False
    own = target._view_src
    if src[0] is target:
        steps = src[2]
    elif own is not None and own[0] is src[0] and own[2] is not None:
        steps = src[2][len(own[2]):]   # (the steps taken from target)
    else:
        return False
    pos = _positions(target, steps)
    return pos is not None and np.array_equal(pos, np.arange(pos.size))
