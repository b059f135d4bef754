"""``tracejit.Size``: the type of ``x.shape`` and ``x.size()``, a tuple as in PyTorch.

A plain tuple subclass, so it compares, hashes, unpacks and indexes like the tuple it
holds; it prints as ``tj.Size([2, 3])``, has ``numel()``, and slicing or adding keeps
it a Size (``x.shape[1:]``, ``x.shape[:-1] + (4,)``). Inside compiled code a dim may be
symbolic (a `shapes.Sym`): it is kept as it is, and ``numel()`` is symbolic too; a sum
with a traced int argument is a plain tuple, for the op it sizes to read.
"""
from __future__ import annotations

from .shapes import Sym

__all__ = ["Size"]


class Size(tuple):
    __slots__ = ()

    def __new__(cls, sizes=()):
        return tuple.__new__(cls, (s if isinstance(s, Sym) else int(s) for s in sizes))

    def numel(self) -> int:
        """The number of elements a tensor of this shape holds."""
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, i):
        if type(i) is slice:   # (a slice of ints: no conversion, ~1 us less than Size(...))
            return tuple.__new__(Size, tuple.__getitem__(self, i))
        return tuple.__getitem__(self, i)

    def __add__(self, other):
        if type(other) is tuple:   # (ints kept as they are: ``x.size()[:-1] + (4, 32)``, 0.5 us less)
            for s in other:
                if type(s) is not int:
                    break
            else:
                return tuple.__new__(Size, tuple.__add__(self, other))
        return _joined(tuple.__add__(self, tuple(other)))

    def __radd__(self, other):
        return _joined(tuple(other) + tuple(self))

    def __repr__(self) -> str:
        return f"tj.Size({list(self)})"

    def __reduce__(self):
        return (Size, (tuple(self),))


def _joined(items: tuple):
    """A Size of `items`, or the plain tuple where one is a traced int (``(n,) + x.shape[1:]``
    in compiled code): the op given it reads it as a size, symbolic under ``dynamic=True``,
    where a Size would read its value."""
    for s in items:
        if getattr(s, "_trace", None) is not None:
            return items
    return Size(items)
