"""Array shortcuts for VJPs when no graph records: a plain backward (grad mode off, no
tracer or profiler) over CPU numpy arrays needs no dispatch and no node per piece, so
cat's and stack's gradient pieces are views of the incoming gradient's array, and
getitem's and batch norm's VJPs wrap arrays they compute directly."""
from __future__ import annotations

import numpy as np

from ..autograd.grad_mode import _state as _grad_state
from ..device import CPU
from ..tensor import Tensor
from . import eager as _eager

__all__ = ["recording", "pieces"]


def recording(*tensors) -> bool:
    """Whether a call may record a graph (a tracer or profiler, grad mode on) or meets a
    tensor that is not a CPU numpy array: where not, a VJP may take its array shortcut."""
    if _eager._tracers_active or _grad_state.enabled:
        return True
    for t in tensors:
        if t.device is not CPU or type(t._data) is not np.ndarray:
            return True
    return False


def pieces(g, dim: int, sizes) -> tuple:
    """g's array cut along `dim` into consecutive slices of these sizes (None: one index,
    the dim dropped, a trailing Ellipsis keeping a 0-d piece an array), as tensors."""
    d, lead, at, out = g._data, (slice(None),) * dim, 0, []
    for n in sizes:
        key = (at, Ellipsis) if n is None else (slice(at, at + n),)
        out.append(Tensor._wrap(d[lead + key], g.dtype, g.device))
        at += 1 if n is None else n
    return tuple(out)
