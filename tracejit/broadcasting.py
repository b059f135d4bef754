"""Broadcasting and agreeing element counts of shapes whose dims may be symbolic (shapes.py)."""
from __future__ import annotations

from .errors import ShapeError
from .shapes import Sym, _assume_equal, _hook, data_dependent, hint

__all__ = ["broadcast_shapes", "specialize_to_agree"]


def broadcast_shapes(op: str, *shapes) -> tuple:
    """NumPy broadcasting; the error names the op and every shape."""
    if len(shapes) == 2 and len(shapes[0]) == len(shapes[1]) and shapes[0] == shapes[1]:
        return tuple(shapes[0])
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        d = 1
        for s in shapes:
            if len(s) < -i:
                continue
            e = s[i]
            if isinstance(e, int) and e == 1:
                continue
            if isinstance(d, int) and d == 1:
                d = e
            elif not (d is e or d == e or _assume_equal(d, e)):
                data_dependent(d, e)
                shown = " and ".join(str(tuple(s)) for s in shapes)
                raise ShapeError(f"{op}: shapes {shown} cannot be broadcast together "
                                 f"(dim {i}: {d} vs {e})")
        out.append(d)
    return tuple(out)


def specialize_to_agree(a, b) -> bool:
    """Element counts `a` and `b` a shape rule needs equal, equal in this capture but not for
    every value of their symbols (``view(B, T, 48)`` of ``(B, T, 4, s3)``): specialize the
    symbols only one side has (all, where both have the same), as ``int()`` would; the
    capture runs again with those dims static. Where each side has symbols of its own
    (``x.reshape(a, b)`` of a dim ``s0``: ``i0*i1`` and ``s0``), specializing them would
    capture once per size: the counts are taken as equal instead, guarded on every call
    (a call where they differ misses the entry and meets eager's error).
    -> whether it could (counts agree now)."""
    if _hook.fn is None or hint(a) != hint(b):
        return False
    fa, fb = (d.free_symbols if isinstance(d, Sym) else set() for d in (a, b))
    if fa - fb and fb - fa and _assume_equal(a, b):
        return True
    for name in sorted((fa ^ fb) or (fa | fb)):
        Sym.symbol(name, 0)._specialized()
    return True
