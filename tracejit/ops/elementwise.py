"""Elementwise primitives: one record each (impl, rule, VJP, scalar kernel expression).

Binary ops broadcast like numpy; operands are promoted to a common dtype before the
implementation runs (Python scalars are "weak"). The ``scalar`` functions build the
expression the fused-kernel generators emit for one element: ``e`` is the backend's
emitter (typed constants ``e.const``, math functions ``e.call`` mapped to vectorizable
versions, casts ``e.cast``); the arguments are names of already-computed scalars.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .. import dtypes as _dt
from ..errors import (ArgumentError, DTypeError, IntegerDivisionByZero, expect_not_bool, no_bool_kernel,
                      refuse_bool_subtraction)
from ..shapes import broadcast_shapes
from ..tensor import Tensor
from .registry import Aval, defprim
from .eager import bind
from .promotion import scalar_as, scalar_aval

__all__ = [
    "add", "sub", "mul", "div", "pow", "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin",
    "cos", "tanh", "sigmoid", "relu", "erf", "sign", "floor", "maximum", "minimum", "where", "clamp",
    "clip", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or", "cast",
    "square", "floor_divide", "remainder", "isnan", "isinf", "isfinite", "nan_to_num", "expm1",
]


def _ew_shape(name, avals):
    """Broadcast result shape; the common cases (equal shapes, scalars) skip the general rule."""
    shape = avals[0].shape
    for a in avals[1:]:
        s = a.shape
        # (tuple == compares items before lengths, and Sym == int specializes the symbol)
        if not s or (len(s) == len(shape) and s == shape):
            continue
        if not shape:
            shape = s
            continue
        return broadcast_shapes(name, *(x.shape for x in avals))
    return shape


def _ew_rule(name, out_bool=False, float_only=False, no_bool=False):
    def rule(*avals, **params):
        shape = _ew_shape(name, avals) if len(avals) > 1 else avals[0].shape
        first = avals[0]
        dt = first.dtype
        if float_only and not dt.is_floating_point:
            raise DTypeError(f"{name}: expected a floating-point tensor, got {dt.name}")
        if no_bool and dt.is_bool:   # (PyTorch has no bool kernel for it)
            expect_not_bool(name, "input", first)
        # (a number's device is the CPU: the first tensor operand's counts)
        dev = next((a.device for a in avals if not a.weak), first.device) if first.weak else first.device
        return Aval(shape, _dt.bool_ if out_bool else dt, dev)
    return rule


def _unary(name, impl, vjp=None, scalar=None, *, save_out=False, save_in=True, int_to_float=True,
           no_bool=False, **kw):
    return defprim(name, impl, _ew_rule(name, no_bool=no_bool), vjp, kind="elementwise", scalar=scalar, promote=True,
                   int_to_float=int_to_float, save_out=save_out,
                   save=(lambda rq: (0,)) if save_in else (lambda rq: ()), **kw)


def _binary(name, impl, vjp=None, scalar=None, *, save=None, save_out=False, out_bool=False,
            int_to_float=False, **kw):
    return defprim(name, impl, _ew_rule(name, out_bool), vjp, kind="elementwise", scalar=scalar,
                   promote=True, int_to_float=int_to_float, save=save, save_out=save_out, **kw)


def _none_rq(rq):
    return ()


# For a product: each input's gradient needs the *other* input (indexed by requires_grad flags).
_SAVE_OTHER = {(True, True): (0, 1), (True, False): (1,), (False, True): (0,), (False, False): ()}


def _ufunc1(name):
    """The impl of a unary op that is exactly the array module's ufunc `name`. Marked with
    ``.ufunc`` (numpy's), so an in-place method can write the result straight into the
    tensor's memory (`eager_into.run_into`: PyTorch's ``out=`` kernels) from this one definition."""
    u = getattr(np, name)

    def impl(xp, a):
        return u(a) if xp is np else getattr(xp, name)(a)
    impl.ufunc = u
    return impl


def _ufunc2(name):
    """`_ufunc1` for a binary op."""
    u = getattr(np, name)

    def impl(xp, a, b):
        return u(a, b) if xp is np else getattr(xp, name)(a, b)
    impl.ufunc = u
    return impl


# ---------------------------------------------------------------- arithmetic
# (bool + bool is numpy's logical or; a kernel's `+` would give the int 2 to the next op)
ADD = _binary("add", _ufunc2("add"), lambda g, out, a, b: (g, g),
              lambda e, a, b: f"({a} | {b})" if getattr(e, "dtype", None) == "bool" else f"({a} + {b})",
              save=_none_rq)
SUB = _binary("sub", _ufunc2("subtract"),
              lambda g, out, a, b, needs=(True, True): (g, neg(g) if needs[1] else None),
              lambda e, a, b: f"({a} - {b})", save=_none_rq, extra={"needs": True, "operands": refuse_bool_subtraction})
MUL = _binary("mul", _ufunc2("multiply"),
              lambda g, out, a, b: (g * b if b is not None else None, g * a if a is not None else None),
              lambda e, a, b: f"({a} * {b})",
              save=lambda rq: _SAVE_OTHER[rq[0], rq[1]])
# b's gradient from a, not from the output (PyTorch's -g * (a / b / b)): PyTorch saves no
# output here, so `y = a / b; y.add_(1)` must leave b's gradient computable.
DIV = _binary("div", _ufunc2("true_divide"),
              lambda g, out, a, b, needs=(True, True): (g / b if needs[0] else None,
                                                        neg(g) * (a / b / b) if needs[1] else None),
              lambda e, a, b: f"({a} / {b})", save=lambda rq: (0, 1) if rq[1] else (1,), int_to_float=True,
              extra={"needs": True})


# Python's // and % (floor semantics; the remainder takes the divisor's sign), as in
# PyTorch. Primitives rather than floor(a / b) so integers stay exact (no float round trip).
def _int_divisor_checked(fn):
    """Integer // and % by zero raise (as in Python and PyTorch) instead of numpy's silent 0."""
    def impl(xp, a, b):
        # (b.all(): a Python or numpy scalar divisor is no device array for xp.all)
        if _int_kind(a) and _int_kind(b) and not (b.all() if hasattr(b, "all") else b) and getattr(a, "size", 1):
            raise IntegerDivisionByZero(f"{fn.__name__}: integer division by zero")
        return fn(a, b) if xp is np else getattr(xp, fn.__name__)(a, b)
    return impl


def _int_kind(x) -> bool:
    dt = getattr(x, "dtype", None)
    if dt is not None:
        return dt.kind in "iub"
    return isinstance(x, (int, np.integer))


def _zeros(g):
    """A zero gradient: zeros, not ``g * 0`` (nan where g is infinite), as PyTorch's."""
    from .creation import zeros_like   # (creation imports this module)
    return zeros_like(g)


FLOOR_DIVIDE = _binary("floor_divide", _int_divisor_checked(np.floor_divide),
                       lambda g, out, a, b: (_zeros(g), _zeros(g)),
                       lambda e, a, b: f"({a} // {b})", save=_none_rq,
                       extra={"operands": no_bool_kernel("floor_divide"), "int_divisor": True})
REMAINDER = _binary("remainder", _int_divisor_checked(np.remainder),
                    lambda g, out, a, b: (g, neg(g) * floor_divide(a, b) if a is not None and b is not None
                                          else None),
                    lambda e, a, b: f"({a} % {b})", save=lambda rq: (0, 1) if rq[1] else (),
                    extra={"operands": no_bool_kernel("remainder"), "int_divisor": True})

# PyTorch's gradients: half each at a tie, and where one operand is nan (so is the result)
# both get all of it
MAXIMUM = _binary(
    "maximum", _ufunc2("maximum"),
    lambda g, out, a, b: (where(lt(a, b), 0.0, where(eq(a, b), g * 0.5, g)),
                          where(gt(a, b), 0.0, where(eq(a, b), g * 0.5, g))),
    lambda e, a, b: f"({a} if ({a} > {b} or {a} != {a}) else {b})", extra={"selects": True})
MINIMUM = _binary(
    "minimum", _ufunc2("minimum"),
    lambda g, out, a, b: (where(gt(a, b), 0.0, where(eq(a, b), g * 0.5, g)),
                          where(lt(a, b), 0.0, where(eq(a, b), g * 0.5, g))),
    lambda e, a, b: f"({a} if ({a} < {b} or {a} != {a}) else {b})", extra={"selects": True})

# ---------------------------------------------------------------- unary math
NEG = _unary("neg", _ufunc1("negative"), lambda g, out, a: (neg(g),),
             lambda e, a: f"(-{a})", save_in=False, int_to_float=False, no_bool=True,
             extra={"selects": True})
ABS = _unary("abs", _ufunc1("absolute"), lambda g, out, a: (g * sign(a),),
             lambda e, a: f"abs({a})", int_to_float=False, no_bool=True, extra={"selects": True})
EXP = _unary("exp", _ufunc1("exp"), lambda g, out, a: (g * out,),
             lambda e, a: e.call("exp", a), save_out=True, save_in=False)
# (g * exp(a), not g * (out + 1): where out is near -1 the sum keeps few digits of exp(a),
# 3e-3 relative in float32 at a = -11, which elu's gradient would inherit)
EXPM1 = _unary("expm1", _ufunc1("expm1"), lambda g, out, a: (g * exp(a),),
               lambda e, a: e.call("expm1", a))
LOG = _unary("log", _ufunc1("log"), lambda g, out, a: (g / a,), lambda e, a: e.call("log", a))
LOG1P = _unary("log1p", _ufunc1("log1p"), lambda g, out, a: (g / (a + 1.0),),
               lambda e, a: e.call("log1p", a))
SQRT = _unary("sqrt", _ufunc1("sqrt"), lambda g, out, a: (g / (out * 2.0),),
              lambda e, a: e.call("sqrt", a), save_out=True, save_in=False)
RSQRT = _unary("rsqrt", lambda xp, a: 1.0 / xp.sqrt(a), lambda g, out, a: (g * (out * out * out) * -0.5,),
               lambda e, a: f"({e.const(1.0)} / {e.call('sqrt', a)})", save_out=True, save_in=False)
SIN = _unary("sin", _ufunc1("sin"), lambda g, out, a: (g * cos(a),), lambda e, a: e.call("sin", a))
COS = _unary("cos", _ufunc1("cos"), lambda g, out, a: (neg(g) * sin(a),), lambda e, a: e.call("cos", a))
TANH = _unary("tanh", _ufunc1("tanh"), lambda g, out, a: (tanh_backward(g, out),),
              lambda e, a: e.call("tanh", a), save_out=True, save_in=False)


def _tanh_backward_vjp(gg, out, g, y):
    # d/dg [g (1 - y^2)] = 1 - y^2 (tanh_backward again); d/dy = -2 g y
    return (tanh_backward(gg, y) if y is not None else None,
            gg * g * y * -2.0 if g is not None and y is not None else None)


# tanh's input gradient g * (1 - y*y) from its output y, as PyTorch's tanh_backward: one
# op, so a large eager backward is one kernel pass; bitwise the three-op composite.
def _tanh_backward_impl(xp, g, y):
    t = y * y
    if isinstance(t, xp.ndarray) and t.ndim:
        xp.subtract(1.0, t, out=t)  # in t's memory: one large temporary instead of two
    else:
        t = 1.0 - t
    return g * t


TANH_BACKWARD = _binary("tanh_backward", _tanh_backward_impl, _tanh_backward_vjp,
                        lambda e, g, y: f"({g} * ({e.const(1.0)} - {y} * {y}))")


def errstate(xp):
    """numpy's errstate for a form whose overflow gives the right limit (exp(-a) = inf for a
    below about -88 in float32: 1 / (1 + inf) = 0); a null context for other array modules."""
    return xp.errstate(over="ignore", under="ignore") if hasattr(xp, "errstate") else contextlib.nullcontext()


def sigmoid_form(xp, a, out=None):
    """sigmoid's numpy form, the one every numpy path runs (the recurrent layers' records
    in place, with ``out=``): 1 / (1 + exp(-a)), within 2.3e-7 relative of torch's float32
    sigmoid; results below the smallest normal come out 0. 6x faster than exp(-|a|) with a
    select per sign."""
    with errstate(xp):
        if out is None:
            return (1 / (1 + xp.exp(-a))).astype(a.dtype, copy=False)
        xp.negative(a, out=out)
        xp.exp(out, out=out)
        out += 1
        xp.reciprocal(out, out=out)
        return out


SIGMOID = _unary("sigmoid", sigmoid_form, lambda g, out, a: (sigmoid_backward(g, out),),
                 lambda e, a: e.call("sigmoid", a), save_out=True, save_in=False, extra={"passes": 4})


def _sigmoid_backward_vjp(gg, out, g, y):
    # d/dg [g y (1 - y)] = y (1 - y) (sigmoid_backward again); d/dy = g (1 - 2y)
    return (sigmoid_backward(gg, y) if y is not None else None,
            gg * g * (1.0 - 2.0 * y) if g is not None and y is not None else None)


def _sigmoid_backward_impl(xp, g, y):
    t = g * y
    u = 1.0 - y
    if isinstance(t, xp.ndarray) and t.shape == u.shape and t.ndim:
        return xp.multiply(t, u, out=t)  # one large temporary less
    return t * u


# sigmoid's input gradient (g * y) * (1 - y) from its output y, as PyTorch's
# sigmoid_backward: one op (one kernel pass when large) instead of three; the numpy impl
# keeps the composite's evaluation order, so results are bitwise the same.
SIGMOID_BACKWARD = _binary("sigmoid_backward", _sigmoid_backward_impl, _sigmoid_backward_vjp,
                           lambda e, g, y: f"(({g} * {y}) * ({e.const(1.0)} - {y}))")


def _relu_backward_impl(xp, g, y):
    keep = y > 0
    if xp is np and keep.shape == g.shape:
        sel = _select_or_zero(keep, g, 0)
        if sel is not None:
            return sel
    return xp.where(keep, g, xp.zeros((), g.dtype))


def _relu_backward_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``) for a float gradient of y's shape:
    `_relu_backward_impl`'s mask product with the comparison and integer type chosen once
    per signature (a small layer's backward: ~2 us of Python less); bitwise the impl's."""
    ity = _INT_OF_WIDTH.get(dtype.itemsize)
    if dtype.kind != "f" or ity is None or shapes[0] is None or shapes[0] != shapes[1]:
        return None
    zero, greater, multiply = dtype.type(0), np.greater, np.multiply

    def relu_backward_same_shape(g, y):
        return multiply(g.view(ity), greater(y, zero)).view(dtype)
    return relu_backward_same_shape


def _relu_backward_vjp(gg, out, g, y):
    # d/dg = the same mask (relu_backward again); the mask's own derivative is 0 a.e.:
    # zeros, as PyTorch gives (a tensor, so eager and compiled gradients agree).
    from .creation import zeros_like
    return (relu_backward(gg, y) if y is not None else None,
            zeros_like(y) if y is not None else None)


# ReLU's input gradient `g where y > 0 else 0` from its output y, as PyTorch's
# threshold_backward: one op, so a large eager backward is one kernel pass; bitwise the
# composite's result.
RELU_BACKWARD = _binary("relu_backward", _relu_backward_impl, _relu_backward_vjp,
                        lambda e, g, y: f"({g} if {y} > {e.const(0)} else {e.const(0)})",
                        extra={"fast": _relu_backward_fast})
RELU = _unary("relu", lambda xp, a: xp.where(a > 0, a, xp.zeros((), a.dtype)) if a.dtype.kind != "f" else xp.maximum(a, a.dtype.type(0)),
              lambda g, out, a: (relu_backward(g, out),),
              lambda e, a: f"({e.const(0)} if {a} <= {e.const(0)} else {a})",
              save_out=True, save_in=False, int_to_float=False, no_bool=True, extra={"selects": True})


def _erf_impl(xp, a):
    if xp.__name__ == "numpy":
        from ._special import erf as _np_erf
        return _np_erf(a)
    import cupyx.scipy.special as sp  # pragma: no cover - GPU only
    return sp.erf(a)


ERF = _unary("erf", _erf_impl, lambda g, out, a: (g * exp(neg(a * a)) * (2.0 / math.sqrt(math.pi)),),
             lambda e, a: e.call("erf", a))
# (a zero gradient, not none: the result requires grad, as PyTorch's)
def _sign_impl(xp, a):
    r = xp.sign(a)
    if r.dtype.kind != "f":
        return r
    zero = r.dtype.type(0)
    return xp.asarray(xp.where(r != r, zero, r) + zero)   # (nan and -0.0: +0.0, as PyTorch's)


SIGN = _unary("sign", _sign_impl, lambda g, out, a: (_zeros(g),),
              lambda e, a: f"({e.const(1)} if {a} > {e.const(0)} else ({e.const(-1)} if {a} < {e.const(0)} else {e.const(0)}))",
              int_to_float=False, save_in=False)
FLOOR = _unary("floor", _ufunc1("floor"), lambda g, out, a: (_zeros(g),),
               lambda e, a: e.call("floor", a), int_to_float=False, save_in=False, no_bool=True)


# ---------------------------------------------------------------- public functions
# Two-operand functions call the record's plan fast path (`Primitive.binary`, which is
# what `bind` calls for two operands without params), one Python frame less per call.
def _op1(prim):
    """The public function of one-operand record `prim`: ``bind(prim, input)``."""
    def op(input):
        return bind(prim, input)
    op.__name__ = op.__qualname__ = prim.name
    return op


def _op2(prim):
    """The public function of two-operand record `prim`: its plan fast path."""
    def op(input, other):
        return prim.binary(input, other)
    op.__name__ = op.__qualname__ = prim.name
    return op


neg, abs, exp, expm1, log, log1p, sqrt, rsqrt, sin, cos, tanh, sigmoid, relu, erf, floor = map(
    _op1, (NEG, ABS, EXP, EXPM1, LOG, LOG1P, SQRT, RSQRT, SIN, COS, TANH, SIGMOID, RELU, ERF, FLOOR))


def sign(input):
    """-1, 0 or 1 by the sign of each element; a bool is its own sign (as in PyTorch)."""
    if input.dtype is _dt.bool_:
        return input.clone()
    return bind(SIGN, input)
mul, floor_divide, remainder, maximum, minimum = map(_op2, (MUL, FLOOR_DIVIDE, REMAINDER, MAXIMUM, MINIMUM))


def _times_alpha(op: str, a, b, alpha):
    """``b * alpha`` as PyTorch scales it: in the result dtype of ``a`` and ``b`` (an int64
    tensor scaled by 0.1 into a float64 sum is not rounded to float32 first), with a bool
    alpha for bools; a float alpha for integers is refused."""
    if alpha == 1:
        return b
    rt = _int_result(a, b)
    if isinstance(alpha, float) and not (rt.is_floating_point or rt.is_complex):
        raise ArgumentError(f"{op}: for integral input tensors, argument alpha must not be a floating "
                            f"point number, got alpha={alpha}")
    if rt is _dt.bool_:
        alpha = bool(alpha)
    if not isinstance(b, Tensor):
        return (bool(b) and alpha) if rt is _dt.bool_ else b * alpha
    return mul(b if b.dtype is rt else cast(b, rt), alpha)


def add(a, b, other=None, *, alpha=1):
    if other is not None:
        b, alpha = alpha_first("add", b, other)
    return ADD.binary(a, b if alpha == 1 else _times_alpha("add", a, b, alpha))


def sub(a, b, other=None, *, alpha=1):
    if other is not None:
        b, alpha = alpha_first("sub", b, other)
    if alpha == 1:
        return SUB.binary(a, b)
    refuse_bool_subtraction([x if hasattr(x, "dtype") else scalar_aval(x, SUB) for x in (a, b)])  # (b is cast)
    return SUB.binary(a, _times_alpha("sub", a, b, alpha))


def _deprecated_form(op: str, old: str, new: str) -> None:
    import warnings
    from ..errors import user_stacklevel
    warnings.warn(f"This overload of {op} is deprecated:\n\t{op}({old})\nConsider using one of the following "
                  f"signatures instead:\n\t{op}({new})", UserWarning, stacklevel=user_stacklevel())


def alpha_first(op: str, alpha, other):
    """PyTorch's deprecated ``op(input, Number alpha, Tensor other)`` (older optimizers write
    ``p.data.add_(-lr, grad)``): -> (other, alpha), with its warning."""
    if isinstance(alpha, Tensor) or not isinstance(other, Tensor):
        raise TypeError(f"{op}: expected ({op}(other, *, alpha=...)), got a third positional argument "
                        f"{type(other).__name__} after {type(alpha).__name__}")
    _deprecated_form(op, "Number alpha, Tensor other", "Tensor other, *, Number alpha")
    return other, alpha


def div(a, b, *, rounding_mode=None):
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        if _int_result(a, b).is_floating_point:
            q = div(a, b)
            return where(lt(q, 0), neg(floor(neg(q))), floor(q))
        # Integers stay exact: floor division, plus one where it rounded a negative
        # inexact quotient down.
        q = floor_divide(a, b)
        # PyTorch divides in the result dtype, a Python int wrapped into it first (-3 is
        # 253 in uint8): the signs that decide the rounding are the wrapped values'.
        a, b = (_in_dtype(x, q.dtype) for x in (a, b))
        inexact_negative = logical_and(ne(remainder(a, b), 0), ne(lt(a, 0), lt(b, 0)))
        return where(inexact_negative, add(q, 1), q)
    if rounding_mode is not None:
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return DIV.binary(a, b)


true_divide = divide = div
multiply = mul
subtract = sub


negative = neg


def pow(a, b):
    if type(b) is int and not 0 <= b <= 127 and isinstance(a, Tensor):
        int_exponent(a.dtype, b)
    return POW.binary(a, b)


def pow_backward(g, a, exponent: float):
    """``(g * exponent) * a ** (exponent - 1)``: the gradient of ``a ** exponent`` (a
    constant exponent) for the cotangent `g`. `g` and `a` share one floating dtype."""
    return POW_BACKWARD.binary(g, a, {"exponent": exponent})  # (= bind(...), a call less)


# (g, y) -> the input gradient of sigmoid, tanh or relu from the cotangent g and the output y
sigmoid_backward, tanh_backward, relu_backward = map(_op2, (SIGMOID_BACKWARD, TANH_BACKWARD, RELU_BACKWARD))


def square(a):
    if a.dtype is _dt.bool_:   # (PyTorch squares a bool as an int64)
        a = cast(a, _dt.int64)
    return mul(a, a)


def _in_dtype(x, dtype):
    """Integer operand `x` (a Python int or a tensor) as `dtype` holds it, wrapping."""
    if type(x) is int:
        return int(scalar_as(x, dtype.np))
    if isinstance(x, Tensor) and x.dtype is not dtype:
        return cast(x, dtype)
    return x


def _int_result(*xs):
    """The promoted dtype of `xs` (tensors or Python numbers; None skipped)."""
    dims, zero, weak = [], [], []
    for x in xs:
        if x is None:
            continue
        if isinstance(x, Tensor):
            (dims if x.ndim else zero).append(x.dtype)
        else:
            weak.append(_dt.scalar_dtype(x))
    return _dt.result_type(dims, weak, zero)


def clamp(a, min=None, max=None):
    if min is None and max is None:
        raise ArgumentError("clamp: at least one of min and max must be given")
    if not a.dtype.is_floating_point:   # (an int tensor and a float bound give a float, a
        for v in (min, max):             # bool tensor and an int bound int64: as they promote)
            if type(v) in (int, float) and _int_result(a, v) is not a.dtype:
                a = cast(a, _int_result(a, v))
        if not (a.dtype is _dt.bool_ or a.dtype.is_floating_point):
            min, max = _dt.number_as(a.dtype, min, "clamp"), _dt.number_as(a.dtype, max, "clamp")
    if (type(min) is float and min != min) or (type(max) is float and max != max):
        from .creation import full_like   # (a NaN bound: NaN everywhere, no gradient, as PyTorch)
        min, max = [full_like(a, math.nan) if type(v) is float and v != v else v for v in (min, max)]
    if ((type(min) not in _PLAIN_BOUNDS or type(max) not in _PLAIN_BOUNDS)  # (hasattr on a
            and (hasattr(min, "_data") or hasattr(max, "_data"))):         # number: ~0.3 us)
        # selects, not maximum/minimum: a value at a bound keeps its gradient (PyTorch's
        # clamp; a tie would halve it), a NaN bound gives NaN; one dtype for all three, a 0-d
        # bound beside a number promoting as a number does (PyTorch's Scalar overload)
        out = a
        if not all(v is None or getattr(v, "dtype", None) is a.dtype for v in (min, max)):
            kinds = [_stand_in(v) if isinstance(v, Tensor) and not v.ndim and (_is_number(v) or _is_number(w))
                     else v for v, w in ((min, max), (max, min))]
            rt = _int_result(a, *kinds)
            out, min, max = [cast(v, rt) if isinstance(v, Tensor) else v for v in (a, min, max)]
        if min is not None:
            out = where(logical_or(lt(out, min), isnan(min)), min, out)
        if max is not None:
            out = where(logical_or(gt(out, max), isnan(max)), max, out)
        return out
    return bind(CLAMP, a, min=min, max=max)


clip = clamp

_PLAIN_BOUNDS = (int, float, type(None))


def _is_number(v) -> bool:
    """A Python number, or a traced one (a weakly typed 0-d tracer: a number argument)."""
    var = getattr(v, "_var", None)
    return type(v) in (int, float, bool) or (var is not None and var.aval.weak)


def _stand_in(v):
    """A Python number of 0-d tensor `v`'s kind, as it promotes (PyTorch's Scalar overload)."""
    return 0.0 if v.dtype.is_floating_point else v.dtype is not _dt.bool_ and 0


def where(condition, input=None, other=None):   # noqa: A002 (PyTorch's keyword names)
    cond, a, b = condition, input, other
    if a is None and b is None:
        return cond.nonzero(as_tuple=True)
    if not (hasattr(cond, "dtype") and cond.dtype is _dt.bool_):
        if not hasattr(cond, "dtype"):
            raise TypeError(f"where: condition must be a bool tensor, got {type(cond).__name__}")
        if cond.dtype is not _dt.uint8:   # PyTorch refuses any other dtype; uint8 is deprecated
            raise DTypeError(f"where: expected condition to be a bool tensor, but got a tensor "
                             f"with dtype {cond.dtype.name}")
        import warnings
        from ..errors import user_stacklevel
        warnings.warn("where received a uint8 condition tensor; use a bool condition instead",
                      UserWarning, stacklevel=user_stacklevel())
        cond = cast(cond, _dt.bool_)
    if type(a) is int or type(b) is int:   # (an int beside an integer tensor is of its dtype: checked, as PyTorch)
        for v, t in ((a, b), (b, a)):
            if type(v) is int and not 0 <= v <= 127 and isinstance(t, Tensor) and t.dtype.category == 1:
                _dt.number_as(t.dtype, v, "where")
    return bind(WHERE, cond, a, b)


def isinf(a):
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return isnan(a)   # (all False: integers hold no inf)
    return logical_and(eq(abs(a), math.inf), logical_not(isnan(a)))


def isfinite(a):
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return logical_not(isnan(a))
    return logical_not(logical_or(isnan(a), eq(abs(a), math.inf)))


def nan_to_num(a, nan=0.0, posinf=None, neginf=None):
    if not a.dtype.is_floating_point:
        return a.clone()  # integers have no nan/inf
    from ..typeinfo import finfo
    top = float(finfo(a.dtype).max)   # of the dtype itself: bf16 is stored as uint16 words
    big = top if posinf is None else posinf
    small = -top if neginf is None else neginf
    out = where(isnan(a), nan, a)
    out = where(eq(out, math.inf), big, out)
    return where(eq(out, -math.inf), small, out)


def cast(a, dtype):
    dtype = _dt.as_dtype(dtype)
    if a.dtype is dtype:
        return a
    return bind(CAST, a, dtype=dtype)


# the records of comparisons, logic, where and cast, clamp and pow (modules of their own
# for length)
from .elementwise_logic import (CAST, EQ, GE, GT, ISNAN, LE, LOGICAL_AND, LOGICAL_NOT, LOGICAL_OR,  # noqa: E402
                               LT, NE, WHERE, _INT_OF_WIDTH, _cmp, _select_or_zero)
eq, ne, lt, le, gt, ge, logical_and, logical_or = map(_op2, (EQ, NE, LT, LE, GT, GE, LOGICAL_AND, LOGICAL_OR))
isnan, logical_not = map(_op1, (ISNAN, LOGICAL_NOT))
from .elementwise_clamp import CLAMP, _clamp_impl, clamp_backward  # noqa: E402
from .elementwise_pow import POW, POW_BACKWARD, int_exponent  # noqa: E402
