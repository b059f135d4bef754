"""one_hot as one primitive: the range check and the encoding in one record.

One dispatch on every path instead of the composite's five; indices outside
[0, num_classes) raise an IndexError naming one_hot. The result is int64 without gradient.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError
from .gather_prim import _in_range_impl
from .registry import Aval, defprim

__all__ = ["ONE_HOT"]


def _one_hot_rule(index, *, num_classes):
    if not index.dtype.is_integer:
        raise DTypeError(f"one_hot: expected an integer tensor, got {index.dtype.name}")
    return Aval(tuple(index.shape) + (num_classes,), _dt.int64, index.device)


def _one_hot_impl(xp, index, *, num_classes):
    _in_range_impl(xp, index, size=num_classes, op="one_hot")
    # zeros, and a 1 written at each index's flat position: one write an index, where the
    # comparison with every class and its cast to int64 were two full passes (5x slower
    # for 4096 indices of 100 classes)
    out = xp.zeros(tuple(index.shape) + (num_classes,), np.int64)
    n = index.size
    if n and num_classes:
        out.reshape(-1)[xp.arange(n) * num_classes + index.reshape(-1)] = 1
    return out


ONE_HOT = defprim("one_hot", _one_hot_impl, _one_hot_rule, None, kind="other",
                  save=lambda rq: ())
