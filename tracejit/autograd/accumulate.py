"""How a leaf's AccumulateGrad takes a gradient: without a copy where only the engine holds it
(_exclusive), else as its own copy (_own_copy; a large float gradient through the backend's
copy kernel). A new `.grad` has the leaf's strides when the leaf is dense in another order
than row-major (transposed, channels_last), else is row-major, as PyTorch's layout contract."""
from __future__ import annotations

import sys

import numpy as np

from ..formats import dense
from ..memory import kept_refs, sole_padded_view
from ..ops.impls import elementwise as _ew
from ..tensor import Tensor


def dense_out_of_order(d) -> bool:
    """True when array `d` is non-overlapping and dense but not row-major: a leaf whose new
    gradient takes its strides (a leaf with gaps or overlaps gets a row-major one)."""
    return not d.flags.c_contiguous and dense(d)


def laid_out_as(g, leaf):
    """`g` in the layout PyTorch's contract gives a new `.grad` of `leaf`: the leaf's strides
    when it is dense out of row-major order, else row-major. Keeps `g`'s graph (a
    create_graph gradient), and `g` itself when its layout fits."""
    d = g._data
    if dense_out_of_order(leaf._data):
        if d.strides == leaf._data.strides:
            return g
        from .. import empty_like
        return empty_like(leaf, dtype=g.dtype).copy_(g)
    return g if d.flags.c_contiguous else g.contiguous()


def _own_copy(g, leaf):
    """``g.detach().clone()`` in `leaf`'s gradient layout (`laid_out_as`); a large float
    gradient through copy's eager kernel on the free cores (the backend's elementwise kernels,
    ops/impls.py), as the engine's accumulations go through add's."""
    d = g._data
    if not d.flags.c_contiguous or dense_out_of_order(leaf._data):
        out = laid_out_as(g.detach(), leaf)
        return out.clone() if out._data is d else out   # (a dense clone keeps its strides)
    if type(d) is np.ndarray:
        out = _ew.copy_of(d)
        if out is not None:
            return Tensor._wrap(out, g.dtype, g.device)
    return g.detach().clone()


def _exclusive(g) -> bool:
    """True when `g` (a gradient arriving at a leaf) is referenced only by the engine.

    Expected references to the tensor: the engine's buffer list, `apply`'s local, this
    function's parameter and getrefcount's argument; to the array: the tensor, the local
    `arr` and getrefcount's argument. The array must own its memory (or be a reshape of a
    whole buffer nobody else holds), be writable and C-contiguous. Then `.grad` can take it
    without a copy, as PyTorch's AccumulateGrad steals a gradient whose use count allows it.
    """
    arr = g._data
    if sys.getrefcount(g) > 4 or (sys.getrefcount(arr) > 3
                                  and sys.getrefcount(arr) > 3 + kept_refs(arr)):
        # (a compiled plan's `memory.OutputSlot` keeping the array is no sharer; asked only
        # when there is a fourth reference: a call less for the usual fresh gradient)
        return False
    flags = arr.flags
    # (a device array's flags have no `writeable`: its memory always is)
    if not (getattr(flags, "writeable", True) and flags.c_contiguous):
        return False
    base = arr.base
    if base is None or sole_padded_view(arr, extra_refs=1):   # (+1: `base` here)
        # (a large compiled-kernel output is a view of a buffer one page larger that only
        # it holds: memory.placed_empty)
        return True
    # A view of a whole buffer held by nothing else (a reduction's result reshaped; a
    # product transposed back): the view's .base, `base` and getrefcount's argument are its
    # three references, plus the tensor it was made from when `g` keeps it as `_base`.
    refs = 3
    owner = g._base
    if owner is not None:
        if owner._data is not base or sys.getrefcount(owner) > 3:  # g's slot, local, argument
            return False
        refs = 4
    return (sys.getrefcount(base) <= refs and type(base) is type(arr) and base.base is None
            and base.size == arr.size and base.flags.c_contiguous)
