"""``a[mask] = b[mask]`` and ``a[mask] = v`` inside a capture, without a data-dependent shape.

Indexing with a boolean mask selects as many elements as the mask holds True, so a capture
cannot give ``b[mask]`` a shape. Written straight back through the same mask into a tensor
of b's shape, the selection is ``where(mask, b, a)`` in place, and a value of the shape one
selected element has (a number, a 0-d tensor, a row) is ``where(mask, v, a)``. The mask
may be one tensor or the same expression written twice (``a[b > 0] = b[b > 0]``), and
the selection may meet numbers on the way (``a[mask] += 1``, ``b[mask] * 2``). While
capturing, ``b[mask]`` is therefore a `MaskedValues`: remembered, not computed. Assigning it
through the same mask into a tensor of b's shape is the ``where``; any other use raises the
error boolean-mask indexing always raised there, so the function runs eagerly as before.
"""
from __future__ import annotations

from ..errors import TraceError
from ..tensor import Tensor
from .. import dtypes as _dt
from .eager import trace_hooks as _trace_hooks

__all__ = ["MaskedValues", "MASK_ERROR", "select", "assign"]

MASK_ERROR = ("indexing with a boolean mask gives a shape that depends on the data, so it cannot "
              "be traced; use tracejit.where(mask, x, 0) or x.masked_fill(~mask, 0) instead")

_OWN = frozenset(("_src", "_mask", "_apply", "__class__", "__repr__", "__str__"))


class MaskedValues(Tensor):
    """``src[mask]`` while capturing: usable only as the value of ``a[mask] = ...`` with the
    same mask; reading anything else of it raises the data-dependent-shape TraceError."""
    __slots__ = ("_src", "_mask")

    def __getattribute__(self, name):
        if name in _OWN:
            return object.__getattribute__(self, name)
        raise TraceError(MASK_ERROR)

    def __repr__(self) -> str:
        return "<the elements of a tensor at a boolean mask, while capturing>"

    __str__ = __repr__

    def _apply(self, fn, other) -> "MaskedValues":
        # elementwise with a number commutes with the selection: ``b[mask] * 2`` is
        # ``(b * 2)[mask]`` (``a[mask] += 1`` reads, adds and writes back so)
        if not isinstance(other, (bool, int, float)):
            raise TraceError(MASK_ERROR)
        return select(fn(self._src, other), self._mask)

    def __add__(self, o):
        return self._apply(lambda t, v: t + v, o)

    def __radd__(self, o):
        return self._apply(lambda t, v: v + t, o)

    def __sub__(self, o):
        return self._apply(lambda t, v: t - v, o)

    def __rsub__(self, o):
        return self._apply(lambda t, v: v - t, o)

    def __mul__(self, o):
        return self._apply(lambda t, v: t * v, o)

    def __rmul__(self, o):
        return self._apply(lambda t, v: v * t, o)

    def __truediv__(self, o):
        return self._apply(lambda t, v: t / v, o)

    def __neg__(self):
        return select(-self._src, self._mask)

    __iadd__, __isub__, __imul__, __itruediv__ = __add__, __sub__, __mul__, __truediv__


def _mask_of(a, index):
    """The boolean mask tensor `index` is (alone, or alone in a tuple) when it indexes the
    leading dims of `a` exactly (PyTorch's rule for a mask); else None."""
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    if not isinstance(index, Tensor) or isinstance(index, MaskedValues) or index.dtype is not _dt.bool_:
        return None
    k = index.ndim
    return index if 0 < k <= a.ndim and tuple(index.shape) == tuple(a.shape[:k]) else None


def select(a, index):
    """`a[index]` while capturing when `index` is a boolean mask of a's leading dims: a
    `MaskedValues`; None otherwise (the caller indexes as usual)."""
    mask = _mask_of(a, index)
    if mask is None or isinstance(a, MaskedValues):
        return None
    t = object.__new__(MaskedValues)
    object.__setattr__(t, "_src", a)
    object.__setattr__(t, "_mask", mask)
    return t


def assign(a, index, value):
    """``a`` with ``a[index] = value`` as a ``where`` when `index` is a boolean mask of a's
    leading dims and `value` is `b[index]` (b of a's shape, the same mask tensor) or has the
    shape of one selected element; None when the assignment is not of that form (the caller
    goes on as usual, raising for a mask)."""
    from .elementwise import cast, where
    from .shape import reshape
    mask = _mask_of(a, index)
    if mask is None:
        return None
    if isinstance(value, MaskedValues):
        src, same = value._src, value._mask
        if not (same is mask or _trace_hooks.same_value(same, mask)) or tuple(src.shape) != tuple(a.shape):
            return None
        value = src
    elif isinstance(value, Tensor):
        if value.ndim > a.ndim - mask.ndim or tuple(value.shape) != tuple(a.shape[a.ndim - value.ndim:]):
            return None   # (a value per selected element: its count depends on the data)
    elif not isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, Tensor) and value.dtype is not a.dtype:
        value = cast(value, a.dtype)
    m = reshape(mask, tuple(mask.shape) + (1,) * (a.ndim - mask.ndim))
    out = where(m, value, a)
    return out if out.dtype is a.dtype else cast(out, a.dtype)
