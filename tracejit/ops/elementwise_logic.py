"""Comparisons, logic, where and cast: their records (ops/elementwise.py re-exports them)."""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..shapes import broadcast_shapes
from .. import bf16 as _bf16
from ..formats import strides_order
from .registry import Aval, defprim
from .elementwise import _binary, _ew_rule, _ufunc1, _ufunc2, _unary, where


# ---------------------------------------------------------------- comparisons and logic
def _cmp(name, impl, op):
    return _binary(name, impl, None, lambda e, a, b: f"({a} {op} {b})", out_bool=True)


EQ = _cmp("eq", _ufunc2("equal"), "==")
NE = _cmp("ne", _ufunc2("not_equal"), "!=")
LT = _cmp("lt", _ufunc2("less"), "<")
LE = _cmp("le", _ufunc2("less_equal"), "<=")
GT = _cmp("gt", _ufunc2("greater"), ">")
GE = _cmp("ge", _ufunc2("greater_equal"), ">=")
# `a != 0` in a's own dtype with no gradient at all (its input's .grad stays undefined): the
# terms of the zero "norm", whose result requires grad in PyTorch while its input gets none
NONZERO_INDICATOR = _unary("nonzero_indicator", lambda xp, a: (a != 0).astype(a.dtype), lambda g, out, a: (None,),
                           lambda e, a: f"({e.const(1)} if {a} != {e.const(0)} else {e.const(0)})",
                           save_in=False, int_to_float=False)
ISNAN = _unary("isnan", _ufunc1("isnan"), None, lambda e, a: f"({a} != {a})",
               int_to_float=False)
ISNAN.rule = _ew_rule("isnan", out_bool=True)


LOGICAL_NOT = defprim("logical_not", _ufunc1("logical_not"), _ew_rule("logical_not", out_bool=True),
                      kind="elementwise", scalar=lambda e, a: f"(not {a})")
LOGICAL_AND = defprim("logical_and", _ufunc2("logical_and"), _ew_rule("logical_and", out_bool=True),
                      kind="elementwise", scalar=lambda e, a, b: f"(bool({a}) and bool({b}))")
LOGICAL_OR = defprim("logical_or", _ufunc2("logical_or"), _ew_rule("logical_or", out_bool=True),
                     kind="elementwise", scalar=lambda e, a, b: f"(bool({a}) or bool({b}))")


def _where_rule(c, a, b):
    shape = broadcast_shapes("where", c.shape, a.shape, b.shape)
    dims = [x.dtype for x in (a, b) if not x.weak and x.shape]
    zero = [x.dtype for x in (a, b) if not x.weak and not x.shape]
    weak = [x.dtype for x in (a, b) if x.weak]
    dev = next((x.device for x in (c, a, b) if not x.weak), c.device)
    return Aval(shape, _dt.result_type(dims, weak, zero), dev)


def _where_impl(xp, c, a, b):
    if xp is np:
        out = _select_or_zero(c, a, b)
        if out is not None:
            return out
    return xp.where(c, a, b)


_INT_OF_WIDTH = {2: np.int16, 4: np.int32, 8: np.int64}


def _is_plus_zero(v) -> bool:
    return type(v) in (int, float) and v == 0 and math.copysign(1.0, v) > 0


def _select_or_zero(c, a, b):
    """``where(c, a, 0)`` or ``where(c, 0, b)`` for a float array (ReLU's and where's own
    gradients) as a bit mask: numpy's where branches per element, ~4 ns each on a random
    mask, against two branch-free passes here. Exact: the selected elements keep their
    bits (nan, inf, -0.0), the others are +0.0. None when the call is not of that form."""
    if type(c) is not np.ndarray or c.dtype != np.bool_:
        return None
    if _is_plus_zero(b) and type(a) is np.ndarray and a.dtype.kind == "f":
        x, keep_where_true = a, True
    elif _is_plus_zero(a) and type(b) is np.ndarray and b.dtype.kind == "f":
        x, keep_where_true = b, False
    else:
        return None
    ity = _INT_OF_WIDTH.get(x.dtype.itemsize)
    if ity is None:
        return None
    # x's bits times the mask as integers (True keeps them, False gives +0.0's): one
    # integer pass, no nan/inf/sign cases (a float product would make -0.0 and nan). A
    # mask widened to all-ones/zeros and a bitwise and costs one ufunc call and pass more
    # (~1.5x the time on 64x100).
    keep = c if keep_where_true else np.logical_not(c)
    return np.multiply(x.view(ity), keep).view(x.dtype)


def _where_scalar(e, c, a, b):
    """The selection in the output's floating dtype: an integer operand converted (a
    conditional of an int64 and a float32 is numba's float64, which the bf16 rounding
    of a widened graph does not take)."""
    if e.dtype in ("float32", "float64"):
        dt = _dt.as_dtype(e.dtype)
        a, b = e.cast(a, dt), e.cast(b, dt)
    return f"({a} if {c} else {b})"


def _where_vjp(g, out, c, a, b, needs=(True, True, True)):
    # (only the branches that take a gradient: where(mask, x, 0.0) and a detached branch
    # cost one masked pass backward, not two)
    return (None, where(c, g, 0.0) if needs[1] else None, where(c, 0.0, g) if needs[2] else None)


def _where_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): numpy's where itself, unless one
    branch is a number and the other an array (`_select_or_zero` may take that call)."""
    return np.where if (shapes[1] is None) == (shapes[2] is None) else None


WHERE = defprim("where", _where_impl, _where_rule, _where_vjp,
                kind="elementwise", scalar=_where_scalar,
                save=lambda rq: (0,), nondiff=(0,),
                extra={"compute_dtype": "out", "selects": True, "needs": True, "fast": _where_fast})  # kernels compute in the output's dtype (c is bool)


def _cast_impl(xp, a, dtype):
    if dtype is _dt.bfloat16 or a.dtype == _bf16.STORAGE:   # bf16 words: convert, never reinterpret
        return _bf16.cast(xp, a, dtype)
    if a.ndim > 1 and 0 in a.strides and a.size:
        # an expanded array: numpy's astype puts broadcast dims innermost, PyTorch's leaves
        # them where they stand (row-major for a row-major source, as `.float()` of a mask)
        order = strides_order(a.shape, a.strides)
        if order is None:
            return a.astype(dtype.np, order="C")
        back = [0] * a.ndim
        for i, d in enumerate(order):
            back[d] = i
        out = xp.empty(tuple(a.shape[d] for d in order), dtype.np).transpose(back)
        xp.copyto(out, a, casting="unsafe")
        return out
    return a.astype(dtype.np)


CAST = defprim("cast", _cast_impl, lambda a, dtype: Aval(a.shape, dtype, a.device),
               lambda g, out, a, dtype: (g,), kind="elementwise",
               scalar=lambda e, a, dtype: e.cast(a, dtype), save=lambda rq: ())
