"""Checks of a tensor's values that must hold on every path.

A check written in Python on the data (``if x.min() < 0: raise``) runs eagerly but is
skipped under capture, where the data is not known: a compiled function would go on to
compute nan from values the eager op refuses. As a primitive the check is part of the
graph, and the interpreter and compiled plans run it as eager does. The result is the
input itself (a view), and its gradient passes through unchanged.
"""
from __future__ import annotations

from .. import bf16 as _bf16
from .. import dtypes as _dt
from ..errors import ShapeError, ValueRangeError
from .registry import Aval, defprim

__all__ = ["IN_UNIT_INTERVAL", "in_unit_interval", "SELECTS", "selects", "CHECK"]


def _same_rule(x, **params):
    """The result is the operand itself (a view)."""
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


def _selects_impl(xp, mask, *, value_shape, region_tail, op="index_put"):
    n = int(mask.sum())
    if n != value_shape[0]:
        raise ShapeError(f"{op}: value of shape {tuple(value_shape)} cannot be broadcast to the indexed "
                         f"region of shape {(n,) + tuple(region_tail)}")
    return mask.view()


SELECTS = defprim("selects", _selects_impl, _same_rule, lambda g, out, m, **kw: (None,),
                  kind="other", extra={"view": True})


def selects(mask, value_shape: tuple, region_tail: tuple, op: str = "index_put"):
    """Boolean `mask`, checked on every path to hold as many True as a value of
    `value_shape` has rows (``a[mask] = v``, one row per selected element): a ShapeError
    naming `op` otherwise, as eager ``index_put``'s."""
    from .eager import bind
    return bind(SELECTS, mask, value_shape=tuple(value_shape), region_tail=tuple(region_tail), op=op)


def _check_impl(xp, pred, *, exc_type, message, where):
    if bool(pred):
        raise exc_type(message)
    return pred


# A check that raises ``exc_type(message)`` at run time when its 0-d condition holds: an
# ``if <traced condition>: raise`` under @script, a derivative that does not exist. It has
# an effect, so dead-code elimination keeps it though nothing reads it.
CHECK = defprim("check", _check_impl, lambda p, **kw: Aval((), _dt.bool_, p.device), None,
                kind="other", extra={"effect": True})
