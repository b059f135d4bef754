"""Checks of a tensor's values that must hold on every path.

A check written in Python on the data (``if x.min() < 0: raise``) runs eagerly but is
skipped under capture, where the data is not known: a compiled function would go on to
compute nan from values the eager op refuses. As a primitive the check is part of the
graph, and the interpreter and compiled plans run it as eager does. The result is the
input itself (a view), and its gradient passes through unchanged.
"""
from __future__ import annotations

from .. import bf16 as _bf16
from ..errors import ValueRangeError
from .registry import Aval, defprim

__all__ = ["IN_UNIT_INTERVAL", "in_unit_interval"]


def _same_rule(x, *, op, name):
    return Aval(x.shape, x.dtype, x.device)


def _unit_impl(xp, x, *, op, name):
    if x.size:
        vals = _bf16.to_float32(x) if _bf16.is_storage(x) else x   # bf16 words: their values
        lo, hi = float(vals.min()), float(vals.max())
        if not (0.0 <= lo and hi <= 1.0):   # (a nan fails both tests)
            raise ValueRangeError(f"{op}: all elements of {name} should be between 0 and 1, got values in "
                                  f"[{lo}, {hi}]")
    return x.view()


IN_UNIT_INTERVAL = defprim("in_unit_interval", _unit_impl, _same_rule, lambda g, out, x, **kw: (g,),
                           kind="other", extra={"view": True})


def in_unit_interval(x, op: str, name: str):
    """`x`, checked to lie in [0, 1] on every path: a ValueRangeError naming `op`, the
    argument `name` and the range found otherwise."""
    from .eager import bind
    return bind(IN_UNIT_INTERVAL, x, op=op, name=name)
