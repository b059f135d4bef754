"""``tracejit.finfo`` and ``tracejit.iinfo``: the numeric limits of a dtype, as PyTorch's.

Programs read them for masks and clamps (``x.masked_fill(m, finfo(x.dtype).min)``,
``eps = finfo(float32).eps``); the values are Python numbers, numpy's for the numpy
dtypes and bfloat16's own (8 significand bits, float32's exponent range).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import dtypes as _dt

__all__ = ["finfo", "iinfo"]

# bfloat16: float32's exponent, 7 stored significand bits
_BF16 = dict(bits=16, eps=2.0 ** -7, max=float(np.float32(3.3895313892515355e38)),
             tiny=2.0 ** -126, resolution=0.01)


class finfo:
    """Limits of a floating dtype: bits, eps, max, min, tiny (= smallest_normal), resolution."""

    def __init__(self, type: Optional[object] = None):
        d = _dt.get_default_dtype() if type is None else _dt.as_dtype(type)
        d = d.to_real()   # (a complex dtype's limits are its parts', as in PyTorch)
        if not d.is_floating_point:
            raise TypeError(f"finfo: {d} is not a floating point dtype; use tracejit.iinfo for integers")
        if d is _dt.bfloat16:
            v = _BF16
        else:
            f = np.finfo(d.np)
            v = dict(bits=int(f.bits), eps=float(f.eps), max=float(f.max), tiny=float(f.tiny),
                     resolution=10.0 ** -int(f.precision))
        self.dtype = d.name
        self.bits, self.eps, self.max = v["bits"], v["eps"], v["max"]
        self.min = -self.max
        self.tiny = self.smallest_normal = v["tiny"]
        self.resolution = v["resolution"]

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.tiny:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer (or bool) dtype: bits, max, min."""

    def __init__(self, type: object):
        d = _dt.as_dtype(type)
        if d.is_floating_point:
            raise TypeError(f"iinfo: {d} is a floating point dtype; use tracejit.finfo")
        self.dtype = d.name
        if d.is_bool:
            self.bits, self.min, self.max = 8, 0, 1
        else:
            i = np.iinfo(d.np)
            self.bits, self.min, self.max = int(i.bits), int(i.min), int(i.max)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
