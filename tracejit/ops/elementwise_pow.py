"""pow and its backward: the records (numpy form with the exact small-integer exponents, VJP,
scalar rule, fast paths); ops/elementwise.py re-exports them."""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..dtypes import int64, number_as
from ..errors import ArgumentError
from .registry import defprim
from .elementwise import _binary, _ew_rule, _zeros, eq, log, pow, pow_backward, where


def _pow_vjp(g, out, a, b):
    if isinstance(b, (int, float)):
        if b == 0:
            return (_zeros(g), None)
        if type(b) in (int, float) and a.dtype.is_floating_point and g.dtype is a.dtype:
            return (pow_backward(g, a, b), None)  # one op (one kernel pass) for the three below
        return (g * b * pow(a, b - 1) if b != 2 else g * 2.0 * a, None)
    # (0 where the exponent is 0, as PyTorch's: not 0 * a**-1, nan at a == 0)
    ga = where(eq(b, 0), 0.0, g * b * pow(a, b - 1.0)) if not isinstance(a, (int, float)) else None
    if out is None:  # the exponent needs no gradient: eager autograd kept no output
        return (ga, None)
    # d/db a**b = out * log(a), as PyTorch: 0 where a == 0 and b >= 0 (not 0 * -inf), -inf
    # where a == 0 and b < 0, nan for a < 0
    if isinstance(a, (int, float)):
        log_a = math.log(a) if a > 0 else -math.inf if a == 0 else math.nan
        return (ga, g * (out * log_a) if a != 0 else g * where(_nonnegative(b), 0.0, out * log_a))
    return (ga, g * where(eq(a, 0) & _nonnegative(b), 0.0, out * log(a)))


def _nonnegative(b):
    """Where the exponent is a real number >= 0 (a complex one: imaginary part 0), as PyTorch's."""
    if b.dtype.is_complex:
        return eq(b.imag, 0) & (b.real >= 0)
    return b >= 0


def int_exponent(dt, b: int) -> None:
    """Refuse a Python int exponent `b` of an integer (or bool) tensor of dtype `dt` where
    PyTorch does: below 0, or beyond the dtype's range (``uint8 ** 300``; it is converted
    to the dtype first, where other binary ops wrap it)."""
    if dt.category > 1:
        return
    if b < 0:
        raise ArgumentError("Integers to negative integer powers are not allowed.")
    number_as(dt if dt.category else int64, b, "pow")


def _pow_impl(xp, a, b):
    if getattr(b, "ndim", 0) == 0 and getattr(a, "dtype", None) is not None and a.dtype.kind == "f":
        return _pow_by_number(a, b, xp)
    # (a tensor exponent, 0-d too; a negative Python int exponent raises, as PyTorch's)
    if getattr(b, "dtype", None) is not None and not isinstance(b, np.generic) and b.dtype.kind in "iu" \
            and (a.dtype.kind in "iub" if hasattr(a, "dtype") else isinstance(a, int)) and (b < 0).any():
        return _int_pow_negative(xp, a, b)
    try:
        return xp.power(a, b)
    except ValueError as e:   # (numpy's, for integers to a negative int: PyTorch's is a RuntimeError)
        raise ArgumentError(str(e)) from None


def _int_pow_negative(xp, a, b):
    """Integers to integer exponents some of which are negative: 1 / a**-b truncated, as
    PyTorch (and the kernels' integer pow) compute it: 0, but 1 for a == 1 and +-1 for
    a == -1 (numpy refuses negative integer exponents)."""
    r = xp.power(a, xp.maximum(b, 0))
    neg = b < 0
    one = xp.where(xp.equal(a, -1), xp.where(b % 2 == 0, 1, -1), xp.where(xp.equal(a, 1), 1, 0))
    return xp.where(neg, one.astype(r.dtype), r)


def _pow_by_number(a, b, xp=np):
    """A float array `a` to a number `b`. A constant small integer exponent is a few
    multiplications, as in PyTorch's and in the kernel generator's pow (Emitter.pow):
    numpy's float32 power calls powf per element, ~50x slower (`a ** 3` over 4M float32
    took 600 ms)."""
    v = float(b)
    n = _MULTIPLIED.get(v)   # (a nan exponent is no key: nan != nan)
    if n is not None:
        out = a * a if n > 1 else a.copy()
        for _ in range(n - 2):
            out *= a
        if v > 0:
            return out
        # (of a 0-d array, a * a is a numpy scalar, which can't take the result in place)
        return xp.true_divide(a.dtype.type(1), out, out=out if isinstance(out, xp.ndarray) else None)
    if v == 0.5:
        return xp.sqrt(a)
    return xp.power(a, b)


_MULTIPLIED = {float(v): builtins.abs(v) for v in (-4, -3, -2, -1, 1, 2, 3, 4)}  # exponent -> factors


def _pow_fast(shapes, dtype, params):
    # the plan's numpy call (registry ``extra["fast"]``): a float array to a number takes
    # `_pow_by_number` without the impl's operand checks
    if shapes[0] is not None and shapes[1] is None and dtype.kind == "f":
        return _pow_by_number
    return None


# The output is read only for the exponent's gradient (``x ** 2``: never kept)
POW = _binary("pow", _pow_impl, _pow_vjp, lambda e, a, b: e.pow(a, b), save_out=lambda rq: rq[1],
              extra={"fast": _pow_fast})


# pow's input gradient for a constant exponent b, ``(g * b) * a ** (b - 1)``, as one op
# (PyTorch's pow_backward is the same formula): a large eager backward makes one kernel
# pass where the composite made three. The numpy impl keeps the composite's evaluation
# order and casts, so results are bitwise the composite's.
def _pow_backward_impl(xp, g, a, exponent):
    t = g * g.dtype.type(exponent)
    # a ** 1 is a itself (pow's impl would copy it: b = 2, the square's gradient)
    p = a if exponent == 2 else _pow_impl(xp, a, a.dtype.type(exponent - 1))
    if isinstance(t, xp.ndarray) and t.ndim and t.shape == p.shape:
        return xp.multiply(t, p, out=t)  # in t's memory: one large temporary less
    return t * p


def _pow_backward_vjp(gg, out, g, a, exponent):
    # d/dg = b a^(b-1) (pow_backward again); d/da = g b (b-1) a^(b-2)
    gg_g = pow_backward(gg, a, exponent) if g is not None else None
    if a is None:
        ga = None
    elif exponent == 1:
        ga = _zeros(gg)  # a ** 0 is constant (pow's own rule for b == 0)
    else:
        ga = pow_backward(gg * g * exponent, a, exponent - 1)
    return (gg_g, ga)


def _pow_backward_scalar(e, g, a, exponent):
    return f"(({g} * {e.const(exponent)}) * {e.pow(a, e.const(exponent - 1))})"


def _pow_backward_fast(shapes, dtype, params):
    # the plan's numpy call (registry ``extra["fast"]``) for the square's gradient of
    # same-shaped operands: the impl's two products, its shape tests made once
    sg, sa = shapes
    if params["exponent"] != 2 or sg is None or not sg or sg != sa:
        return None
    factor = dtype.type(params["exponent"])
    multiply = np.multiply

    def square_backward(g, a):
        t = multiply(g, factor)
        return multiply(t, a, out=t)
    return square_backward


POW_BACKWARD = defprim("pow_backward", _pow_backward_impl, _ew_rule("pow_backward", float_only=True),
                       _pow_backward_vjp,
                       kind="elementwise", scalar=_pow_backward_scalar, promote=True,
                       save=lambda rq: (0, 1), extra={"fast": _pow_backward_fast})
