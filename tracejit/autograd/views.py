"""In-place writes into a view of a tensor that is part of an autograd graph.

PyTorch lets views be modified in place (``nn.ReLU(inplace=True)`` after
``Conv2d(bias=False)`` is the everyday case) with ``CopySlices``: the base's history
becomes "old base with the view's region replaced", and the view's "that region of the new
base". We do the same with existing primitives, eagerly, from the view's flat positions
inside the base (row-major positions, whatever its layout):

    new_base = index_put(base.reshape(-1), positions, result.reshape(-1))
    view     = new_base.reshape(-1)[positions].reshape(view.shape)

Both steps have VJPs already, so the gradients equal PyTorch's. Other views of the same
base made before the write still carry the old history; as PyTorch, we regenerate a view's
grad_fn lazily when it next enters the graph (`refresh_stale_view`). Checking starts with
the first in-place write under autograd, so programs that never write in place pay nothing.
"""
from __future__ import annotations

import weakref

import numpy as np

__all__ = ["view_positions", "rebase_view_history", "refresh_stale_view", "ACTIVE", "WHOLE"]

# Set by the first in-place write under autograd: from then on view inputs are checked.
ACTIVE = [False]
# grad_fn nodes produced for a view by a rebase/refresh -> the base grad_fn they derive from
_DERIVED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _address(arr) -> int:
    if isinstance(arr, np.ndarray):
        return arr.__array_interface__["data"][0]
    return int(arr.data.ptr)  # cupy


class _Whole:
    """`view_positions`' answer for a view that is all of its base's memory in the base's
    row-major order (a ``view``/``reshape`` of a contiguous tensor, the output of an
    instance norm): the positions are ``arange(numel)``, never built."""

    def __repr__(self) -> str:
        return "WHOLE"


WHOLE = _Whole()


def view_positions(view, base):
    """Flat (row-major) element positions of `view` inside `base` (an int64 array of view's
    shape), `WHOLE` for a view that is all of the base in order, or None when the geometry
    cannot be expressed that way (a base whose elements overlap or run backwards in memory,
    an element of the view outside the base)."""
    b, v = base._data, view._data
    if (b.dtype == v.dtype and b.size == v.size and b.flags.c_contiguous and v.flags.c_contiguous
            and _address(v) == _address(b)):
        return WHOLE
    return _positions_array(view, base)


def _positions_array(view, base):
    """`view_positions` as an array (the general case)."""
    b, v = base._data, view._data
    if b.dtype != v.dtype:
        b = _real_layout(b, v.dtype)
        if b is None:
            return None
    item = b.itemsize
    offset = _address(v) - _address(b)
    if offset % item or any(s % item for s in v.strides):
        return None
    xp = np if isinstance(b, np.ndarray) else view._xp()
    pos = _offsets(xp, v.shape, v.strides, item, offset // item)
    if b.flags.c_contiguous:
        return pos
    # a permuted or strided base: each memory offset's row-major position in it
    if any(s < 0 for s in b.strides) or any(s % item for s in b.strides) or b.size == 0:
        return None
    where = _offsets(xp, b.shape, b.strides, item, 0).reshape(-1)
    lookup = xp.full(int(where.max()) + 1, -1, dtype=np.int64)
    lookup[where] = xp.arange(b.size, dtype=np.int64)
    if int((lookup >= 0).sum()) != b.size or pos.size and (int(pos.min()) < 0 or int(pos.max()) >= lookup.size):
        return None
    pos = lookup[pos]
    return None if pos.size and int(pos.min()) < 0 else pos


def _real_layout(b, dtype):
    """A complex array's memory as its (..., 2) real and imaginary parts, for a view of
    real `dtype` into it (``z.real``, ``view_as_real(z)[..., 0]``); None for other pairs.
    Positions in it index ``view_as_real(base)``, which `_flat_of` and `_from_flat` use."""
    if (not isinstance(b, np.ndarray) or b.dtype.kind != "c" or dtype.kind != "f"
            or dtype.itemsize * 2 != b.dtype.itemsize):
        return None
    from numpy.lib.stride_tricks import as_strided
    return as_strided(b.real, shape=b.shape + (2,), strides=b.strides + (dtype.itemsize,))


def _flat_of(base, view):
    """The elements view positions index, as a recorded 1-d tensor: the base's, or for a
    real view of a complex base its real and imaginary parts."""
    from .. import ops
    if base.dtype.is_complex and not view.dtype.is_complex:
        return ops.reshape(ops.view_as_real(base), (-1,))
    return ops.reshape(base, (-1,))


def _from_flat(base, view, flat):
    """The inverse of `_flat_of`: `flat` in the base's shape and dtype."""
    from .. import ops
    if base.dtype.is_complex and not view.dtype.is_complex:
        return ops.view_as_complex(ops.reshape(flat, tuple(base.shape) + (2,)))
    return ops.reshape(flat, tuple(base.shape))


def _offsets(xp, shape, strides, item: int, start: int):
    """Memory offsets in items of each element of an array of `shape` and byte `strides`."""
    pos = xp.full(shape, start, dtype=np.int64)
    for axis, (n, stride) in enumerate(zip(shape, strides)):
        dims = [1] * len(shape)
        dims[axis] = n
        pos = pos + (xp.arange(n, dtype=np.int64) * (stride // item)).reshape(dims)
    return pos


def rebase_view_history(view, base, positions, result) -> None:
    """Give `base` and `view` the histories of an in-place write of `result` into `view`.

    Called after the values are already in memory: only ``grad_fn`` changes here, the
    arrays computed on the way are thrown away.
    """
    from .. import ops
    from ..tensor import Tensor
    if positions is WHOLE:
        if _reads_view(result, view):
            _rebase_whole(view, base, result)
            return
        # (the result does not read the view, as copy_ or fill_: the base's old history must
        # still get its zero gradient, as PyTorch's, so the general form runs)
        positions = _positions_array(view, base)
    idx = Tensor._wrap(positions.reshape(-1), None, base.device)
    _bypass_view_hooks(view, base, idx, result)
    flat = _flat_of(base, view)
    flat_new = ops.cast(ops.reshape(result, (-1,)), flat.dtype)
    new_base = _from_flat(base, view, ops.index_put(flat, idx, flat_new))
    olds = [(t, t.grad_fn, t._output_nr) for t in (base, view)]
    base._requires_grad = True
    base.grad_fn = new_base.grad_fn
    base._output_nr = new_base._output_nr
    _regather(view, base, idx)
    for t, old, nr in olds:   # (a retain_grad() follows the new value, as PyTorch's)
        if old is not None:
            old._pass_retain(nr, t)


def _reads_view(result, view) -> bool:
    """Whether `result`'s node takes `view`'s current value as an input (relu_, mul_)."""
    node = result.grad_fn
    return node is not None and view.grad_fn is not None and any(
        n is view.grad_fn and nr == view._output_nr for n, nr in node.next_functions)


def _rebase_whole(view, base, result) -> None:
    """`rebase_view_history` for a view that is all of its base in order: the new base is
    the result reshaped, and the view that reshaped back (no positions, no scatter)."""
    from .. import ops
    if _hooked(view):   # (hooks on the view's old node must not see the write: the general form)
        rebase_view_history(view, base, _positions_array(view, base), result)
        return
    flat_new = ops.cast(result, base.dtype) if result.dtype is not base.dtype else result
    new_base = ops.reshape(flat_new, tuple(base.shape))
    olds = [(t, t.grad_fn, t._output_nr) for t in (base, view)]
    base._requires_grad = True
    base.grad_fn = new_base.grad_fn
    base._output_nr = new_base._output_nr
    new_view = ops.reshape(new_base, tuple(view.shape))
    view._requires_grad = True
    view.grad_fn = new_view.grad_fn
    view._output_nr = new_view._output_nr
    _DERIVED[new_view.grad_fn] = base.grad_fn
    for t, o, nr in olds:
        if o is not None:
            o._pass_retain(nr, t)


def _hooked(view) -> bool:
    """Whether `view`'s node has tensor hooks registered for `view`'s output."""
    old = view.grad_fn
    hooks = old is not None and old._hooks is not None and old._hooks.tensor
    return bool(hooks) and view._output_nr in hooks


def _bypass_view_hooks(view, base, idx, result) -> None:
    """PyTorch's write into a view sends the gradient of the view's old value to the base
    directly, not through the view's node: hooks registered on the view before the write do
    not see it. So where the view's node has hooks, the write's node reads a fresh gather
    of the base's elements (the same gradient) instead of that node."""
    old, nr, node = view.grad_fn, view._output_nr, result.grad_fn
    if not _hooked(view) or node is None or old not in node._next:
        return
    from .. import ops
    fresh = ops.reshape(ops.getitem(_flat_of(base, view), idx), tuple(view.shape))
    node.next_functions = [(fresh.grad_fn, fresh._output_nr) if n is old and r == nr else (n, r)
                           for n, r in node.next_functions]


def _regather(view, base, idx) -> None:
    """view's history := its elements gathered from the base's current history."""
    from .. import ops
    new_view = ops.reshape(ops.getitem(_flat_of(base, view), idx), tuple(view.shape))
    view._requires_grad = True
    view.grad_fn = new_view.grad_fn
    view._output_nr = new_view._output_nr
    _DERIVED[new_view.grad_fn] = base.grad_fn


_FRESH_WALK = 64  # nodes `_is_fresh` looks at before it calls a view stale


def _is_fresh(view, base) -> bool:
    """Whether `view`'s history derives from `base`'s current one.

    The walk goes back from the view's grad_fn through view primitives (their first edge)
    and through nodes that are not primitives (a `Function`'s node, a compiled call's:
    every edge), which make views too. It stops at any other primitive. Reaching base's
    current grad_fn proves freshness: an in-place write gives the base a new node, made
    after the view, which the view's history cannot reach."""
    node = view.grad_fn
    target = base.grad_fn
    if target is None or node is None:
        return True  # a leaf base (never written in place under autograd) or no history
    start = node
    for _ in range(_FRESH_WALK):   # the common case first, without the set: view primitives
        if node is target:         # from the view's node straight to the base's
            return True
        prim = getattr(node, "prim", None)
        if prim is None or not (prim.is_view or (prim.view_if is not None and prim.view_if(node.params))):
            break
        node = node._next[0]
    todo, seen = [start], set()
    while todo and len(seen) < _FRESH_WALK:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        if node is target or _DERIVED.get(node) is target:
            return True
        seen.add(id(node))
        prim = getattr(node, "prim", None)
        if prim is None:
            todo.extend(node._next)
        elif prim.is_view or (prim.view_if is not None and prim.view_if(node.params)):
            todo.append(node._next[0])
    return False


def refresh_stale_view(view) -> None:
    """Regenerate `view`'s history if its base was written in place since it was made."""
    base = view._base
    if _is_fresh(view, base):
        return
    positions = view_positions(view, base)
    if positions is None:
        raise RuntimeError(
            "a view of a tensor that was modified in place is used after the modification, and "
            "its history cannot be rebuilt (the base's elements overlap or run backwards in memory); "
            "take the view again "
            "after the in-place operation")
    from .grad_mode import enable_grad
    from ..tensor import Tensor
    if positions is WHOLE:
        positions = _positions_array(view, base)
    with enable_grad():
        _regather(view, base, Tensor._wrap(positions.reshape(-1), None, base.device))
