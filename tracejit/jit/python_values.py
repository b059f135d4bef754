"""What Python code reads from a tracer: a bool, a number, an array, a printed value.

A tracer computed from runtime scalar arguments and sizes alone gives the value of the call
being captured, guarded (scalars.py); one computed from tensor data raises a `TraceError`
naming the user's line. ``math.floor``, ``math.ceil`` and ``math.trunc`` of a number
computed from sizes (a MoE capacity ``math.ceil(n * 1.25 / 4)``) give a symbolic size
instead (`size_args.rounded`), and ``int()`` of one guards the int it gives, not the float.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ..errors import TraceError, user_where
from .constfold import known_as
from .scalars import NOT_KNOWN
from .size_args import rounded

__all__ = ["PythonValues"]


def _rounding(kind: str):
    """``math.<kind>`` of a tracer: a symbolic size where `rounded` gives one."""
    def op(self):
        v = rounded(self, kind)
        return getattr(math, kind)(self._concrete(f"math.{kind}(tensor)")) if v is None else v
    op.__name__ = f"__{kind}__"
    return op


class PythonValues:
    """`Tracer`'s conversions to Python values."""

    __slots__ = ()

    def _concrete(self, what: str, kind: str = "value"):
        """The value Python code asks for (`kind`: "bool", "value" a number, "array"), where
        the capture knows it; else a TraceError saying why it cannot."""
        # from runtime scalar arguments only; else from sizes, literals and small tensors of
        # Python state only
        v = (self._trace.concretize(self, "bool" if kind == "bool" else "value", what)
             if self._var.aval.weak else known_as(self._trace, self._var, kind))
        if v is not NOT_KNOWN:
            return v
        where = user_where(3)
        if self._var.aval.weak:
            raise TraceError(
                f"{what} needs the value of a runtime scalar argument{where}, computed where the "
                f"capture cannot see it (inside a loop body, or mixed with tensor data). Compute "
                f"the value outside the function and pass it in, or move the Python use out of "
                f"the loop.")
        raise TraceError(
            f"{what} needs the value of a traced tensor{where}, which tracing cannot capture: "
            f"the compiled program must not depend on tensor values through Python. Use "
            f"tracejit.cond(pred, true_fn, false_fn, operands) or @tracejit.script (graph control "
            f"flow for an if/while on tensors), tracejit.where(...) for elementwise choices, compute "
            f"the value outside the compiled function (.item() there) and pass it in, or run eagerly "
            f"with tracejit.eager().")

    def __bool__(self):
        return bool(self._concrete("bool(tensor) (an `if`/`while`/`and`/`or` on a tensor)", "bool"))

    def item(self):
        return self._concrete("tensor.item()")

    def numpy(self, *, force: bool = False):
        return np.asarray(self._concrete("tensor.numpy()", "array"))

    def tolist(self):
        v = self._concrete("tensor.tolist()", "array")
        return v.tolist() if hasattr(v, "tolist") else v

    def __float__(self):
        return float(self._concrete("float(tensor)"))

    def __int__(self):
        v = rounded(self, "int")   # (int() must return an int: no symbolic size)
        return int(self._concrete("int(tensor)")) if v is None else v

    __floor__, __ceil__, __trunc__ = (_rounding(kind) for kind in ("floor", "ceil", "trunc"))

    def __index__(self):
        return operator.index(self._concrete("using a number argument as an index, size or range bound"
                                             if self._var.aval.weak else "using a tensor as an index or range bound"))

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._concrete("converting a tensor to a numpy array", "array"), dtype=dtype)

    def _host(self):
        return np.asarray(self._concrete("reading tensor data", "array"))

    # print(x) and f"{x}" show values, which a capture does not have: as a graph break in
    # torch.compile, the function runs eagerly (each call prints), or raises if fullgraph
    def __str__(self) -> str:
        return str(self._concrete("printing a tensor (print, str or an f-string)"))

    def __format__(self, spec):
        return format(self._concrete("printing a tensor (print, str or an f-string)"), spec)
