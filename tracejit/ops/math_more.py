"""More elementwise math, with PyTorch's names and aliases.

Primitives (numpy form, shape rule, VJP; a scalar rule where the expression needs only
what every backend has: arithmetic and floor) for what no composite of existing ops
gives: asin, acos, atan, atan2, asinh, acosh, atanh, ceil, trunc, round, lgamma,
digamma, erfinv, bitwise and/or/xor/not. Without a scalar rule an op runs through its
numpy form in compiled code too (a step, not fused), which these rarer functions can
afford. tan and reciprocal are primitives too (their gradients read the output, as PyTorch's),
and sinh, cosh, exp2, log2 and log10 (as composites they lost digits).
Composites for the rest: frac,
fmod, hypot, lerp, addcmul, addcdiv, logit, xlogy, sinc, erfc, rad2deg, deg2rad,
logaddexp, copysign, heaviside, float_power, clamp_min/max, and the aliases.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError, UnsupportedDTypeError, no_bool_kernel
from ..tensor import Tensor
from .eager import bind
from .elementwise import (_binary, _zeros, _deprecated_form, _ew_rule, _int_divisor_checked, _int_result, _op1, _op2,
                          _ufunc1, _ufunc2,
                          _unary, abs as _abs,
                          cast, cos, erf, exp, log, log1p, maximum, minimum, neg, sin, sqrt, where)
from .registry import defprim
from .dtype_checks import takes
from .opmath import opmath

__all__ = ["asin", "acos", "atan", "atan2", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan",
           "arctan2", "arcsinh", "arccosh", "arctanh", "ceil", "trunc", "fix", "round", "frac",
           "sinh", "cosh", "tan", "log2", "log10", "exp2", "reciprocal", "fmod", "hypot", "lerp",
           "addcmul", "addcdiv", "logit", "xlogy", "sinc", "erfc", "erfinv", "lgamma", "digamma",
           "rad2deg", "deg2rad", "logaddexp", "logaddexp2", "copysign", "heaviside", "float_power",
           "clamp_min", "clamp_max", "positive", "absolute", "signbit", "bitwise_and",
           "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift",
           "logical_xor", "isposinf", "isneginf", "isreal"]


# ---------------------------------------------------------------- inverse trigonometry
ASIN = _unary("asin", _ufunc1("arcsin"), lambda g, out, a: (g / sqrt(1 - a * a),))
ACOS = _unary("acos", _ufunc1("arccos"), lambda g, out, a: (neg(g) / sqrt(1 - a * a),))
ATAN = _unary("atan", _ufunc1("arctan"), lambda g, out, a: (g / (1 + a * a),))
ASINH = _unary("asinh", _ufunc1("arcsinh"), lambda g, out, a: (g / sqrt(a * a + 1),))
ACOSH = _unary("acosh", _ufunc1("arccosh"), lambda g, out, a: (g / sqrt(a * a - 1),))
ATANH = _unary("atanh", _ufunc1("arctanh"), lambda g, out, a: (g / (1 - a * a),))


def _atan2_vjp(g, out, a, b):
    den = a * a + b * b
    den = where(den == 0, math.inf, den)   # (at the origin: 0, as PyTorch)
    return (g * b / den if a is not None else None, neg(g) * a / den if b is not None else None)


ATAN2 = _binary("atan2", _ufunc2("arctan2"), _atan2_vjp, save=lambda rq: (0, 1), int_to_float=True)


asin, acos, atan, asinh, acosh, atanh = map(_op1, (ASIN, ACOS, ATAN, ASINH, ACOSH, ATANH))
atan2 = _op2(ATAN2)
arcsin, arccos, arctan, arctan2 = asin, acos, atan, atan2
arcsinh, arccosh, arctanh = asinh, acosh, atanh


# ---------------------------------------------------------------- rounding
def _zero_grad(g, out, a):
    return (_zeros(g),)


CEIL = _unary("ceil", _ufunc1("ceil"), _zero_grad,
              lambda e, a: f"(-{e.call('floor', f'(-{a})')})", int_to_float=False, save_in=False,
              no_bool=True)
TRUNC = _unary("trunc", _ufunc1("trunc"), _zero_grad,
               lambda e, a: f"({e.call('floor', a)} if {a} >= {e.const(0)} else "
                            f"(-{e.call('floor', f'(-{a})')}))", int_to_float=False, save_in=False,
               no_bool=True)


def _round_scalar(e, a):
    f = e.call("floor", a)
    half, one, two = e.const(0.5), e.const(1), e.const(2)
    # half to even: up when past .5, or at .5 from an odd floor
    r = (f"({f} + {one} if (({a} - {f}) > {half} or (({a} - {f}) == {half} and "
         f"({f} - {two} * {e.call('floor', f'({f} / {two})')}) != {e.const(0)})) else {f})")
    # a zero result keeps the input's sign (round(-0.3) is -0.0, as numpy's and PyTorch's)
    return f"({r} if {r} != {e.const(0)} else {a} * {e.const(0)})"


ROUND = _unary("round", lambda xp, a: xp.round(a), _zero_grad, _round_scalar, int_to_float=False,
               save_in=False, no_bool=True)


ceil, trunc = _op1(CEIL), _op1(TRUNC)
fix = trunc


def round(input, *, decimals: int = 0):  # noqa: A001  (PyTorch's name)
    """Round half to even (``decimals`` places: scaled by 10**decimals around the rounding)."""
    if input.dtype.is_integer:
        return input.clone()   # (integers are whole: the kernel's rule would cast its 0.5 to 0)
    if decimals == 0:
        return bind(ROUND, input)
    scale = 10.0 ** decimals
    return bind(ROUND, input * scale) / scale


@takes("input")
def frac(input):
    return input - trunc(input)


# ---------------------------------------------------------------- special functions
def _lgamma_impl(xp, a):
    v = np.asarray(a, np.float64)
    pole = (v <= 0) & (v == np.floor(v))     # 0, -1, -2, ...: +inf, where math.lgamma raises
    out = np.asarray(np.frompyfunc(math.lgamma, 1, 1)(np.where(pole, 1.0, v)), np.float64)
    return np.where(pole, np.inf, out).astype(a.dtype)


def _digamma_np(x: np.ndarray) -> np.ndarray:
    """psi(x): the recurrence up to x >= 6, then the asymptotic series; reflection below 0."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    neg_ = x < 0
    y = np.where(neg_, 1 - x, x)
    acc = np.zeros_like(y)
    while True:
        small = y < 6
        if not small.any():
            break
        acc = acc - np.where(small, 1 / np.where(small, y, 1), 0)
        y = np.where(small, y + 1, y)
    inv = 1 / y
    inv2 = inv * inv
    series = np.log(y) - 0.5 * inv - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
        1 / 240 - inv2 / 132))))
    out = acc + series
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(neg_, out - np.pi / np.tan(np.pi * x), out)
        out = np.where((x <= 0) & (x == np.floor(x)), np.nan, out)
    return np.where(x == 0, np.copysign(np.inf, -x), out)   # (the pole at 0: -inf at +0, as PyTorch's)


def _digamma_vjp(g, out, a):
    from .special_fns import polygamma
    return (g * polygamma(1, a),)


DIGAMMA = _unary("digamma", lambda xp, a: np.asarray(_digamma_np(np.asarray(a))).astype(a.dtype),
                 _digamma_vjp, host=True)
LGAMMA = _unary("lgamma", _lgamma_impl, lambda g, out, a: (g * digamma(a),), host=True)


def _erfinv_impl(xp, a):
    y = np.asarray(a, np.float64)
    # Giles' single-precision approximation as the start, then two Newton steps on erf
    w = -np.log(np.clip((1 - y) * (1 + y), 1e-300, None))
    small = w < 5
    ws, wb = w - 2.5, np.sqrt(np.maximum(w, 5)) - 3
    ps = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        ps = ps * ws + c
    pb = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        pb = pb * wb + c
    x = np.where(small, ps, pb) * y
    from ._special import erf as _np_erf
    with np.errstate(divide="ignore", invalid="ignore"):   # |y| >= 1 is fixed up below
        for _ in range(2):
            err = _np_erf(x) - y
            x = x - err / (2 / np.sqrt(np.pi) * np.exp(-x * x))
    x = np.where(y == 1, np.inf, np.where(y == -1, -np.inf, x))
    x = np.where(np.abs(y) > 1, np.nan, x)
    return np.asarray(x).astype(a.dtype)


def _erfinv_vjp(g, out, a):
    # from the input, erfinv computed again, as PyTorch's: the output may be written in
    # place after the op
    y = erfinv(a)
    return (g * (math.sqrt(math.pi) / 2) * exp(y * y),)


ERFINV = _unary("erfinv", _erfinv_impl, _erfinv_vjp, host=True)
_erfc_u = np.frompyfunc(math.erfc, 1, 1)
# (not 1 - erf(x): that loses every digit once erf(x) rounds to 1, x > 4 in float32)
ERFC = _unary("erfc", lambda xp, a: np.asarray(_erfc_u(np.asarray(a, np.float64)), np.float64).astype(a.dtype),
              lambda g, out, a: (g * exp(neg(a * a)) * (-2.0 / math.sqrt(math.pi)),),
              lambda e, a: e.call("erfc", a))   # (kernels: mathlib's erfc, the same bits)
lgamma, digamma, erfinv, erfc = map(_op1, (LGAMMA, DIGAMMA, ERFINV, ERFC))


# ---------------------------------------------------------------- composites
# sinh, cosh, exp2, log2 and log10 are primitives: as composites of exp and log they lost
# digits (sinh as (e^x - e^-x) / 2 cancels near 0: 2.3e6 float64 ulps at 1e-4; exp2 as
# exp(x ln 2) carries ln 2's rounding times x: 64 float32 ulps at 127; log2 and log10 as
# log(x) * c: 3 ulps) and overflowed early (sinh and cosh of 89 in float32). The numpy
# forms are numpy's ufuncs; kernels compute sinh and cosh from expm1 and exp with no
# cancellation, and exp(|x| / 2) squared in halves where e^|x| alone would overflow.
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _sinh_scalar(e, a) -> str:
    h = e.call("exp", f"(abs({a}) * {e.const(0.5)})")
    big = f"(({e.const(0.5)} * {h}) * {h})"
    small = f"(({e.call('expm1', a)} - {e.call('expm1', f'(-{a})')}) * {e.const(0.5)})"
    return f"({small} if abs({a}) < {e.const(20.0)} else ({big} if {a} > {e.const(0)} else -{big}))"


def _cosh_scalar(e, a) -> str:
    h = e.call("exp", f"(abs({a}) * {e.const(0.5)})")
    small = f"(({e.call('exp', a)} + {e.call('exp', f'(-{a})')}) * {e.const(0.5)})"
    return f"({small} if abs({a}) < {e.const(20.0)} else (({e.const(0.5)} * {h}) * {h}))"


def _f32_in_f64(name):
    """numpy's ufunc `name`, float32 computed in float64 and rounded once: numpy's float32
    forms are up to 2.3 ulps off (log10(100) is 2.0000002), its float64 ones within one."""
    def impl(xp, a):
        f = getattr(xp, name)
        return f(a.astype(np.float64)).astype(np.float32) if a.dtype == np.float32 else f(a)
    return impl


SINH = _unary("sinh", _f32_in_f64("sinh"), lambda g, out, a: (g * cosh(a),), _sinh_scalar)
COSH = _unary("cosh", _f32_in_f64("cosh"), lambda g, out, a: (g * sinh(a),), _cosh_scalar)
EXP2 = _unary("exp2", _f32_in_f64("exp2"), lambda g, out, a: (g * out * _LN2,),
              lambda e, a: e.call("exp2", a), save_out=True, save_in=False)
LOG2 = _unary("log2", _f32_in_f64("log2"), lambda g, out, a: (g / (a * _LN2),), lambda e, a: e.call("log2", a))
LOG10 = _unary("log10", _f32_in_f64("log10"), lambda g, out, a: (g / (a * _LN10),),
               lambda e, a: e.call("log10", a))
_sinh, _cosh, _exp2, _log2, _log10 = map(_op1, (SINH, COSH, EXP2, LOG2, LOG10))


def sinh(input):
    # complex operands run as the composite (complex_ops.py has exp)
    return (exp(input) - exp(neg(input))) * 0.5 if input.dtype.is_complex else _sinh(input)


def cosh(input):
    return (exp(input) + exp(neg(input))) * 0.5 if input.dtype.is_complex else _cosh(input)


# tan and reciprocal are primitives whose gradient reads the output, as PyTorch's does
# (derivatives.yaml saves `result`): the input may be written in place after the op.
TAN = _unary("tan", lambda xp, a: xp.sin(a) / xp.cos(a), lambda g, out, a: (g * (out * out + 1.0),),
             lambda e, a: f"({e.call('sin', a)} / {e.call('cos', a)})", save_out=True, save_in=False)
RECIPROCAL = _unary("reciprocal", lambda xp, a: 1.0 / a, lambda g, out, a: (neg(g) * (out * out),),
                    lambda e, a: f"({e.const(1.0)} / {a})", save_out=True, save_in=False)
_tan, _reciprocal = map(_op1, (TAN, RECIPROCAL))


def tan(input):
    # complex operands run as the composite (complex_ops.py has its sin, cos and division)
    return sin(input) / cos(input) if input.dtype.is_complex else _tan(input)


def reciprocal(input):
    return 1.0 / input if input.dtype.is_complex else _reciprocal(input)


def log2(input):
    return log(input) * (1 / _LN2) if input.dtype.is_complex else _log2(input)


def log10(input):
    return log(input) * (1 / _LN10) if input.dtype.is_complex else _log10(input)


def exp2(input):
    return exp(input * _LN2) if input.dtype.is_complex else _exp2(input)


def _fmod_scalar(e, a, b):
    if e.dtype.startswith("float"):
        return e.call("fmod", a, b)
    # C's truncated remainder from Python's floored one: r takes b's sign; move it to a's
    r = f"({a} % {b})"
    return f"({r} - ({b} if ({r} != {e.const(0)} and (({r} < {e.const(0)}) != ({a} < {e.const(0)}))) " \
           f"else {e.const(0)}))"


# Remainder with the sign of the dividend (C's fmod): np.fmod is exact, where
# a - trunc(a / b) * b loses the low bits of a large quotient in float32.
def _fmod_vjp(g, out, a, b):
    return (g, neg(g) * trunc(a / b) if a is not None and b is not None else None)


FMOD = _binary("fmod", _int_divisor_checked(np.fmod), _fmod_vjp, _fmod_scalar,
               save=lambda rq: (0, 1) if rq[1] else (),
               extra={"operands": no_bool_kernel("fmod"), "int_divisor": True})
fmod = _op2(FMOD)


def hypot(input, other):
    dt = _int_result(input, other)   # (squared in an integer operand's dtype, they overflow)
    if not dt.is_floating_point:
        from ..errors import UnsupportedDTypeError
        raise UnsupportedDTypeError(f"hypot: expected a floating point operand, got {dt.name} ones")
    return _hypot(input, other)


# numpy's hypot: no overflow or underflow of the squares, inf where either side is (nan too)
HYPOT = _binary("hypot", _ufunc2("hypot"), lambda g, out, a, b: (
    g * a / out if a is not None else None, g * b / out if b is not None else None),
    save=lambda rq: (0, 1), save_out=True)
_hypot = _op2(HYPOT)


@takes("input", "end")
def lerp(input, end, weight):
    """PyTorch's two-sided form: `end` exactly at weight 1, and its NaN where an infinite
    end point meets a weight it does not multiply by 0. As PyTorch, `end` and a weight tensor
    of any dims have input's dtype, and a weight number or 0-d tensor converts to it."""
    for name, t in (("end", end), ("weight", weight)):
        if isinstance(t, Tensor) and t.dtype is not input.dtype and (name == "end" or t.ndim):
            raise DTypeError(f"lerp: expected dtype {input.dtype.name} for `{name}` but got dtype {t.dtype.name}")
    if not isinstance(weight, Tensor):
        weight = _dt.number_as(input.dtype, weight, "lerp")
    elif weight.dtype is not input.dtype:
        weight = cast(weight, input.dtype)
    diff = end - input
    if not isinstance(weight, Tensor):
        return input + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)
    return where(weight.abs() < 0.5, input + weight * diff, end - diff * (1 - weight))


def value_first(op: str, tensor1, tensor2, rest: tuple, value):
    """addcmul/addcdiv's operands, also from the deprecated ``op(input, Number value, Tensor
    tensor1, Tensor tensor2)``: -> (tensor1, tensor2, value)."""
    if not rest:
        return tensor1, tensor2, value
    if len(rest) == 1 and not isinstance(tensor1, Tensor) and isinstance(tensor2, Tensor):
        _deprecated_form(op, "Number value, Tensor tensor1, Tensor tensor2",
                         "Tensor tensor1, Tensor tensor2, *, Number value")
        return tensor2, rest[0], tensor1
    raise TypeError(f"{op}: expected ({op}(tensor1, tensor2, *, value=...)), got {2 + len(rest)} positional "
                    f"operands")


def addcmul(input, tensor1, tensor2, *rest, value=1):
    tensor1, tensor2, value = value_first("addcmul", tensor1, tensor2, rest, value)
    if all(t.dtype.is_bool for t in (input, tensor1, tensor2)):
        raise UnsupportedDTypeError("addcmul: not implemented for three bool tensors (PyTorch has no bool "
                                    "kernel); cast them with .int() or use logical_and/logical_or")
    if type(value) is float and all(t.dtype.category < 2 for t in (input, tensor1, tensor2)):
        value = int(value)   # (PyTorch casts it to the integer result's dtype)
    # (value 1 left out: a Python int would promote bool/uint8 operands, PyTorch's does not)
    return input + (tensor1 * tensor2 if type(value) is int and value == 1 else value * tensor1 * tensor2)


def addcdiv(input, tensor1, tensor2, *rest, value=1):
    tensor1, tensor2, value = value_first("addcdiv", tensor1, tensor2, rest, value)
    if tensor1.dtype.category < 2 and tensor2.dtype.category < 2:
        raise DTypeError("addcdiv: integer division with addcdiv is not supported (PyTorch refuses it): "
                         "write (input + value * tensor1 / tensor2) for true division, or cast tensor1 to float")
    return input + value * tensor1 / tensor2


def logit(input, eps=None):
    x = input if eps is None else input.clamp(eps, 1 - eps)
    return log(x) - log1p(neg(x))   # (at 0 and 1: gradient inf, as PyTorch's; the ratio's was nan)


def _float_result(input, other):
    """The promoted dtype of two operands (tensors or numbers), made floating point (the
    default dtype for integers), as PyTorch's float-valued binary functions compute in."""
    rt = _int_result(input, other)
    return rt if rt.is_floating_point else _dt.get_default_dtype()


def _real(op: str, *operands) -> None:
    """Raise where an operand (tensor or number) is complex: PyTorch has no complex kernel for `op`."""
    if any(isinstance(a, complex) or getattr(getattr(a, "dtype", None), "is_complex", False) for a in operands):
        raise UnsupportedDTypeError(f"{op}: complex operands are not supported")


def xlogy(input, other):
    """x * log(y), 0 where x == 0 and y is not nan (also when y is 0)."""
    return x_times_log(input, other, log, 1.0, "xlogy")


def x_times_log(input, other, fn, neutral: float, op: str):
    """x * fn(y) in the promoted float dtype, 0 where x == 0 and y is not nan (`neutral`:
    a y whose fn is finite, read there instead): xlogy's and xlog1py's."""
    _real(op, input, other)
    rt = _float_result(input, other)
    from .creation import full_like
    if not hasattr(input, "dtype"):
        input = full_like(other, input, dtype=rt)
    input = cast(input, rt) if input.dtype is not rt else input
    # (a number `other` as a tensor of the result's dtype: where() would make it float32)
    other = full_like(input, other, dtype=rt) if not hasattr(other, "dtype") else other
    if other.dtype is not rt:
        other = cast(other, rt)
    zero = (input == 0) & (other == other)
    return where(zero, 0.0, input * fn(where(zero, neutral, other)))


@opmath
def sinc(input):
    x = input * math.pi
    safe = where(input == 0, 1.0, x)
    return where(input == 0, 1.0, sin(safe) / safe)


def rad2deg(input):
    return input * (180.0 / math.pi)


def deg2rad(input):
    return input * (math.pi / 180.0)


def logaddexp(input, other):
    """log(exp(input) + exp(other)) in the operands' floating dtype; two equal infinities
    give that infinity (their difference, NaN, counts as 0). Integer or bool operands that
    promote to an integer dtype raise, as PyTorch has no kernel for them."""
    rt = _inexact_result("logaddexp", input, other)
    input, other = [cast(v, rt) if hasattr(v, "dtype") and v.dtype is not rt else v for v in (input, other)]
    d = input - other
    return maximum(input, other) + log1p(exp(neg(_abs(where(d == d, d, 0.0)))))


def _inexact_result(op: str, input, other):
    rt = _int_result(input, other)
    if not (rt.is_floating_point or rt.is_complex):
        raise UnsupportedDTypeError(f"{op}: not implemented for {rt.name} operands; cast one with .float()")
    return rt


def logaddexp2(input, other):
    _inexact_result("logaddexp2", input, other)
    ln2 = math.log(2)
    return logaddexp(input * ln2, other * ln2) / ln2


def copysign(input, other):
    """|input| with the sign of `other` (a tensor or a number); integers become floats."""
    _real("copysign", input, other)
    rt = _float_result(input, other)
    if input.dtype is not rt:
        input = cast(input, rt)
    mag = _abs(input)
    if not hasattr(other, "dtype"):
        return neg(mag) if math.copysign(1.0, other) < 0 else mag
    return where(signbit(other), neg(mag), mag)


def heaviside(input, values):
    return where(input == 0, values, cast(input > 0, input.dtype))


def float_power(input, exponent):
    """input ** exponent in double precision: complex128 when either is complex, else float64."""
    wide = _dt.complex128 if any(v.dtype.is_complex if hasattr(v, "dtype") else isinstance(v, complex)
                                 for v in (input, exponent)) else _dt.float64
    a = cast(input, wide) if hasattr(input, "dtype") else input
    b = cast(exponent, wide) if hasattr(exponent, "dtype") else exponent
    return a ** b


def clamp_min(input, min):  # noqa: A002
    return maximum(input, min) if hasattr(min, "dtype") else input.clamp(min=min)


def clamp_max(input, max):  # noqa: A002
    return minimum(input, max) if hasattr(max, "dtype") else input.clamp(max=max)


@takes("input", ints=True)
def positive(input):
    return input


def absolute(input):
    return _abs(input)


SIGNBIT = defprim("signbit", lambda xp, a: xp.signbit(a), _ew_rule("signbit", out_bool=True), None,
                  kind="elementwise", save=lambda rq: ())


def signbit(input):
    """True where the sign bit is set (-0.0 included)."""
    if input.dtype.is_floating_point:
        return bind(SIGNBIT, input)
    return input < 0


def _int_or_bool(prim, unary: bool = False):
    """`prim`'s public function: integer or bool tensors only (a float one: TypeError)."""
    def check(operands):
        for t in operands:
            if isinstance(t, float) or hasattr(t, "dtype") and t.dtype.is_floating_point:
                raise TypeError(f"{prim.name}: expected integer or bool tensors, got {getattr(t, 'dtype', t)}")

    def op1(input):
        check((input,))
        return bind(prim, input)

    def op2(input, other):
        check((input, other))
        return prim.binary(input, other)
    op = op1 if unary else op2
    op.__name__ = op.__qualname__ = prim.name
    return op


BITWISE_AND = _binary("bitwise_and", _ufunc2("bitwise_and"), None)
BITWISE_OR = _binary("bitwise_or", _ufunc2("bitwise_or"), None)
BITWISE_XOR = _binary("bitwise_xor", _ufunc2("bitwise_xor"), None)
BITWISE_NOT = _unary("bitwise_not", _ufunc1("invert"), None, int_to_float=False)
# ``input << other`` and ``input >> other`` of integer tensors: bits shifted out are lost,
# the right shift is arithmetic (the sign bit is kept)
LEFT_SHIFT = _binary("bitwise_left_shift", _ufunc2("left_shift"), None,
                     extra={"operands": no_bool_kernel("bitwise_left_shift")})
RIGHT_SHIFT = _binary("bitwise_right_shift", _ufunc2("right_shift"), None,
                      extra={"operands": no_bool_kernel("bitwise_right_shift")})
bitwise_and, bitwise_or, bitwise_xor, bitwise_left_shift, bitwise_right_shift = map(
    _int_or_bool, (BITWISE_AND, BITWISE_OR, BITWISE_XOR, LEFT_SHIFT, RIGHT_SHIFT))
bitwise_not = _int_or_bool(BITWISE_NOT, unary=True)


def logical_xor(input, other):
    return (input != 0) != (other != 0)


def isposinf(input):
    return input == float("inf")


def isneginf(input):
    return input == float("-inf")


def isreal(input):
    """True where the imaginary part is 0: everywhere for a real tensor."""
    if input.dtype.is_complex:
        return input.imag == 0
    from .creation import ones
    return ones(tuple(input.shape), dtype=_dt.bool_, device=input.device)
