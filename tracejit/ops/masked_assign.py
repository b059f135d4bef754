"""``a[mask] = b[mask]`` and ``a[mask] = v`` inside a capture, without a data-dependent shape.

Indexing with a boolean mask selects as many elements as the mask holds True: in a capture
``b[mask]`` has a data-dependent size (ops/host_steps.py). Written straight back through the
same mask into a tensor of b's shape, the selection is ``where(mask, b, a)`` in place, and a
value of the shape one selected element has (a number, a 0-d tensor, a row) is
``where(mask, v, a)``, with no size to compute; a value with a row per selected element is
spread by the mask's running count (the count of Trues checked in the graph). The mask may
be one tensor or the same expression written twice (``a[b > 0] = b[b > 0]``). Every other
assignment through a mask is the general ``index_put`` at the mask's nonzero positions.
"""
from __future__ import annotations

from ..tensor import Tensor
from .. import dtypes as _dt
from .eager import trace_hooks as _trace_hooks, trace_state

__all__ = ["note_selection", "assign"]


def _mask_of(a, index):
    """The boolean mask tensor `index` is (alone, or alone in a tuple) when it indexes the
    leading dims of `a` exactly (PyTorch's rule for a mask); else None."""
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    if not isinstance(index, Tensor) or index.dtype is not _dt.bool_:
        return None
    k = index.ndim
    return index if 0 < k <= a.ndim and tuple(index.shape) == tuple(a.shape[:k]) else None


def note_selection(out, a, index) -> None:
    """Remember that the traced `out` is ``a[index]`` for a boolean mask `index` of a's
    leading dims (`assign` recognizes it while `out` holds that value)."""
    mask = _mask_of(a, index)
    if mask is not None:
        out._trace.host_steps[("selection", id(out))] = (out, out._var, a, mask)


def assign(a, index, value):
    """``a`` with ``a[index] = value`` as a ``where`` when `index` is a boolean mask of a's
    leading dims and `value` is `b[index]` (b of a's shape, the same mask tensor) or has the
    shape of one selected element; None when the assignment is not of that form (the caller
    goes on as usual)."""
    from .elementwise import cast, where
    from .shape import reshape
    mask = _mask_of(a, index)
    if mask is None:
        return None
    sel = trace_state.tracer.host_steps.get(("selection", id(value)))
    if sel is not None and sel[0] is value and sel[1] is value._var:
        src, same = sel[2], sel[3]
        if not (same is mask or _trace_hooks.same_value(same, mask)) or tuple(src.shape) != tuple(a.shape):
            return None
        value = src
    elif isinstance(value, Tensor):
        tail = tuple(a.shape[mask.ndim:])
        if value.ndim == len(tail) + 1 and tuple(value.shape[1:]) == tail and type(value.shape[0]) is int:
            value = _per_selected(a, mask, value, tail)   # (a row per selected element)
        elif value.ndim > a.ndim - mask.ndim or tuple(value.shape) != tuple(a.shape[a.ndim - value.ndim:]):
            return None
    elif not isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, Tensor) and value.dtype is not a.dtype:
        value = cast(value, a.dtype)
    m = reshape(mask, tuple(mask.shape) + (1,) * (a.ndim - mask.ndim))
    out = where(m, value, a)
    return out if out.dtype is a.dtype else cast(out, a.dtype)


def _per_selected(a, mask, value, tail: tuple):
    """`value` (a row per True of `mask`, in order) spread to a's shape: row k where the
    k-th True is, row 0 elsewhere (where `assign`'s where keeps a); the count of Trues
    checked on every path (value_checks_prim.SELECTS)."""
    from .indexing import index_select
    from .reductions import cumsum
    from .shape import reshape
    from .value_checks_prim import selects
    if value.shape[0] == 1:
        return reshape(value, tail)   # (one row broadcasts to every selected element)
    checked = selects(mask, tuple(value.shape), tail)
    if not value.shape[0]:   # (`a` itself, after the check that the mask selects nothing)
        from .elementwise import where
        return where(reshape(checked, tuple(mask.shape) + (1,) * len(tail)), a, a)
    flat = reshape(checked, (-1,))
    rows = (cumsum(flat, 0, dtype=_dt.int64) - 1).clamp(min=0, max=value.shape[0] - 1)
    return reshape(index_select(value, 0, rows), tuple(a.shape))
