"""clamp and its backward: the records (numpy form, shape rule, VJP, scalar rule and the
backward's two-operand fast path) and clamp_backward; ops/elementwise.py re-exports them.

Large eager calls run one-pass kernels made from the scalar rules
(compiler/cpu/kernels/vectorized.py: a select gains from its one pass)."""
from __future__ import annotations

import math

import numpy as np

from .promotion import NUMPY_WEAK_SCALARS, scalar_as
from .registry import defprim
from .elementwise import _ew_rule
from .elementwise_logic import _INT_OF_WIDTH, _is_plus_zero, _select_or_zero, _where_impl


def _clamp_impl(xp, a, min=None, max=None, open=False):
    out = a
    if min is not None:
        out = _clamp_side(xp, out < min, a, out, min)
    if max is not None:
        out = _clamp_side(xp, out > max, a, out, max)
    return out


def _clamp_side(xp, beyond, a, out, bound):
    """`out` with `bound` where `beyond`. A +0 bound on a float array (ReLU as
    ``clamp(min=0)``) takes `where`'s branch-free select (`_select_or_zero`): bitwise the
    same result (kept elements keep their bits, -0.0 and nan included), 2x faster."""
    if xp is np and _is_plus_zero(bound):
        sel = _select_or_zero(beyond, 0, out)
        if sel is not None:
            return sel
    return xp.where(beyond, a.dtype.type(bound), out)


def _clamp_vjp(g, out, a, min=None, max=None, open=False):
    if min is None and max is None:
        return (g,)
    return (clamp_backward(g, a, min, max, open),)


def _clamp_scalar(e, a, min=None, max=None, open=False):
    if min is not None and max is not None and min > max:   # (max wins, as in the impl; nan stays)
        return f"({a} if {a} != {a} else {e.const(max)})"
    expr = a
    if max is not None:
        expr = f"({e.const(max)} if {a} > {e.const(max)} else {expr})"
    if min is not None:
        expr = f"({e.const(min)} if {a} < {e.const(min)} else {expr})"
    return expr


def _clamp_fast(shapes, dtype, params):
    # the plan's numpy call (registry ``extra["fast"]``) for one +0 bound on a float array
    # (ReLU as ``clamp(min=0)``): `_clamp_side`'s select as the integer product, the
    # comparison and the integer type chosen once per signature (64x100 float32: 8.4 ->
    # ~4 us a call); results bitwise the impl's
    lo, hi = params.get("min"), params.get("max")
    if (dtype.kind == "f" and shapes[0] and (lo, hi) != (None, None) and _nonzero_finite(lo)
            and _nonzero_finite(hi)):
        return _clamp_between(dtype, lo, hi)
    ity = _INT_OF_WIDTH.get(dtype.itemsize)
    if (lo is None) == (hi is None) or dtype.kind != "f" or ity is None or not shapes[0]:
        return None
    bound = lo if lo is not None else hi
    if not _is_plus_zero(bound):
        return None
    beyond = np.less if lo is not None else np.greater
    multiply, logical_not = np.multiply, np.logical_not

    def clamp_at_zero(x):
        # kept where not beyond the bound (nan included: no comparison holds)
        k = beyond(x, 0)
        return multiply(x.view(ity), logical_not(k, out=k)).view(dtype)
    return clamp_at_zero


def _nonzero_finite(bound) -> bool:
    """A bound `_clamp_between` takes: none, or a finite nonzero number (a zero's sign
    and a nan bound keep the impl's selects)."""
    return bound is None or (type(bound) in (int, float) and bound != 0 and math.isfinite(bound))


def _clamp_between(dtype, lo, hi):
    """The plan's call for finite nonzero bounds on a float array: numpy's maximum then
    minimum in place, one pass each and no masks. The same values as the impl: bounds cast
    as it casts them, nan kept, the max bound winning where min > max."""
    lo = None if lo is None else dtype.type(lo)
    hi = None if hi is None else dtype.type(hi)
    maximum, minimum = np.maximum, np.minimum
    if hi is None:
        return lambda x: maximum(x, lo)
    if lo is None:
        return lambda x: minimum(x, hi)

    def clamp_between(x):
        out = maximum(x, lo)
        return minimum(out, hi, out=out)
    return clamp_between


CLAMP = defprim("clamp", _clamp_impl, _ew_rule("clamp"), _clamp_vjp, kind="elementwise",
                scalar=_clamp_scalar, promote=True, save=lambda rq: (0,), extra={"fast": _clamp_fast})


# clamp's input gradient ``where(min <= a <= max, g, 0)`` as one op, as PyTorch's
# clamp_backward: one bind and one kernel pass when large, where the composite was two to
# four ops; its numpy impl is the composite's own evaluation, so results are bitwise equal.
def _clamp_backward_impl(xp, g, a, min=None, max=None, open=False):
    mask = None
    if min is not None:
        mask = (a > _bound_operand(min, a.dtype)) if open else (a >= _bound_operand(min, a.dtype))
    if max is not None:
        m2 = (a < _bound_operand(max, a.dtype)) if open else (a <= _bound_operand(max, a.dtype))
        mask = m2 if mask is None else xp.logical_and(mask, m2)
    return _where_impl(xp, mask, g, 0.0)


def _bound_operand(v, npd):
    # as `bind` passes a Python scalar operand of a promoting op (eager._make_plan):
    # a float as it is (numpy's weak scalars), other numbers cast to the compute dtype
    return v if type(v) is float and NUMPY_WEAK_SCALARS else scalar_as(v, npd)


def _clamp_backward_vjp(gg, out, g, a, min=None, max=None, open=False):
    # d/dg = the same mask (clamp_backward again); the mask is piecewise constant in a
    # (the composite's comparisons had no gradient either)
    return (clamp_backward(gg, a, min, max, open) if a is not None else None, None)


def _clamp_backward_scalar(e, g, a, min=None, max=None, open=False):
    conds, eq = [], "" if open else "="
    if min is not None:
        conds.append(f"{a} >{eq} {e.const(min)}")
    if max is not None:
        conds.append(f"{a} <{eq} {e.const(max)}")
    return f"({g} if ({' and '.join(conds)}) else {e.const(0)})"


def _clamp_backward_fast(shapes, dtype, params):
    # the plan's numpy call (registry ``extra["fast"]``) for one bound (ReLU's gradient):
    # the impl's comparison and `_select_or_zero`'s integer product, the bound operand and
    # the integer type chosen once per signature
    lo, hi = params.get("min"), params.get("max")   # (defaults: the impl's None)
    ity = _INT_OF_WIDTH.get(dtype.itemsize)
    if (lo is None and hi is None) or shapes[0] is None or not shapes[1] or ity is None:
        return None
    multiply, open_ = np.multiply, params.get("open", False)
    if lo is not None and hi is not None:
        # both bounds (a probability clamped into (eps, 1 - eps)): the impl's two
        # comparisons and their conjunction, then the same integer product
        lo, hi = _bound_operand(lo, dtype), _bound_operand(hi, dtype)
        ge, le = (np.greater, np.less) if open_ else (np.greater_equal, np.less_equal)
        both = np.logical_and

        def clamp_backward_two_bounds(g, a):
            return multiply(g.view(ity), both(ge(a, lo), le(a, hi))).view(dtype)
        return clamp_backward_two_bounds
    if lo is not None:
        bound, compare = _bound_operand(lo, dtype), np.greater if open_ else np.greater_equal
    else:
        bound, compare = _bound_operand(hi, dtype), np.less if open_ else np.less_equal

    def clamp_backward_one_bound(g, a):
        return multiply(g.view(ity), compare(a, bound)).view(dtype)
    return clamp_backward_one_bound


CLAMP_BACKWARD = defprim("clamp_backward", _clamp_backward_impl,
                         _ew_rule("clamp_backward", float_only=True), _clamp_backward_vjp,
                         kind="elementwise", scalar=_clamp_backward_scalar, promote=True,
                         save=lambda rq: (1,), nondiff=(1,), extra={"fast": _clamp_backward_fast})


def clamp_backward(g, a, min=None, max=None, open=False):
    """``g`` where ``min <= a <= max`` (a bound of None is no bound), else 0: clamp's
    input gradient (PyTorch's clamp_backward); `open`: ``min < a < max`` (hardtanh's)."""
    # (= bind(CLAMP_BACKWARD, g, a, min=min, max=max): the record's two-operand fast
    # path itself, one Python call less in every relu's backward)
    return CLAMP_BACKWARD.binary(g, a, {"min": min, "max": max, "open": True} if open else {"min": min, "max": max})
