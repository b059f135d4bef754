"""one_hot as one primitive: the range check and the encoding in one record.

One dispatch on every path instead of the composite's five; indices outside
[0, num_classes) raise an IndexError naming one_hot. The result is int64 without gradient.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError
from .indexing import _in_range_impl
from .registry import Aval, defprim

__all__ = ["ONE_HOT"]


def _one_hot_rule(index, *, num_classes):
    if not index.dtype.is_integer:
        raise DTypeError(f"one_hot: expected an integer tensor, got {index.dtype.name}")
    return Aval(tuple(index.shape) + (num_classes,), _dt.int64, index.device)


def _one_hot_impl(xp, index, *, num_classes):
    _in_range_impl(xp, index, size=num_classes, op="one_hot")
    return (index[..., None] == xp.arange(num_classes)).astype(np.int64)


ONE_HOT = defprim("one_hot", _one_hot_impl, _one_hot_rule, None, kind="other",
                  save=lambda rq: ())
