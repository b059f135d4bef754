"""GELU as one elementwise primitive, and its derivative as another.

Why a primitive: as a composite, tanh-GELU is nine elementwise ops forward and about
eighteen backward, where PyTorch makes two passes. As one record with a scalar rule, a
large eager call is one kernel pass each way, and the compiler fuses it like any
elementwise op.

The forward evaluates the composite's formula in the same order and dtype,
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x*x*x)))`` or
``0.5 * x * (1 + erf(x / sqrt(2)))``. ``gelu_backward(g, x)`` is ``g * gelu'(x)``; its own
VJP is written with tracejit ops, so higher-order gradients work.
"""
from __future__ import annotations

import math

from .elementwise import _erf_impl, _ew_rule, exp, tanh
from .registry import defprim
from .eager import bind
from .dtype_checks import takes
from ..errors import ArgumentError

__all__ = ["gelu", "gelu_backward", "APPROXIMATE"]

APPROXIMATE = ("none", "tanh")
_S = math.sqrt(2.0 / math.pi)        # 0.7978845608028654
_K = 0.044715
_R = 1.0 / math.sqrt(2.0)            # erf's argument scale
_P = 1.0 / math.sqrt(2.0 * math.pi)  # the normal density's constant


# ---------------------------------------------------------------- forward
def _gelu_impl(xp, x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + xp.tanh(_S * (x + _K * x * x * x)))
    return 0.5 * x * (1.0 + _erf_impl(xp, x * _R))


def _gelu_scalar(e, x, approximate="none"):
    c = e.const
    if approximate == "tanh":
        inner = f"({c(_S)} * ({x} + {c(_K)} * {x} * {x} * {x}))"
        return f"({c(0.5)} * {x} * ({c(1.0)} + {e.call('tanh', inner)}))"
    return f"({c(0.5)} * {x} * ({c(1.0)} + {e.call('erf', f'({x} * {c(_R)})')}))"


# int_to_float: an integer input computes in the default float dtype, as the composite's
# ``0.5 * x`` did.
GELU = defprim("gelu", _gelu_impl, _ew_rule("gelu"),
               lambda g, out, x, approximate="none": (gelu_backward(g, x, approximate),),
               kind="elementwise", scalar=_gelu_scalar, promote=True, int_to_float=True,
               save=lambda rq: (0,), grad_name="GeluBackward0")


# ---------------------------------------------------------------- derivative
def _gelu_backward_impl(xp, g, x, approximate="none"):
    if approximate == "tanh":
        x2 = x * x
        t = xp.tanh(_S * (x + _K * x2 * x))
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (_S * (1.0 + 3.0 * _K * x2)))
    return g * (0.5 * (1.0 + _erf_impl(xp, x * _R)) + x * xp.exp(-0.5 * x * x) * _P)


def _gelu_backward_scalar(e, g, x, approximate="none"):
    c = e.const
    if approximate == "tanh":
        t = e.call("tanh", f"({c(_S)} * ({x} + {c(_K)} * {x} * {x} * {x}))")
        slope = f"({c(_S)} * ({c(1.0)} + {c(3.0 * _K)} * {x} * {x}))"
        return (f"({g} * ({c(0.5)} * ({c(1.0)} + {t}) + {c(0.5)} * {x} * ({c(1.0)} - {t} * {t}) "
                f"* {slope}))")
    cdf = f"({c(0.5)} * ({c(1.0)} + {e.call('erf', f'({x} * {c(_R)})')}))"
    pdf = f"({e.call('exp', f'({c(-0.5)} * {x} * {x})')} * {c(_P)})"
    return f"({g} * ({cdf} + {x} * {pdf}))"


def _second_derivative(x, approximate):
    """gelu''(x), with tracejit ops (for the VJP of gelu_backward)."""
    if approximate == "tanh":
        x2 = x * x
        t = tanh(_S * (x + _K * x2 * x))
        du = _S * (1.0 + 3.0 * _K * x2)          # u'(x)
        d2u = (6.0 * _S * _K) * x                 # u''(x)
        return (1.0 - t * t) * (du + 0.5 * x * (d2u - 2.0 * t * du * du))
    return exp(-0.5 * x * x) * _P * (2.0 - x * x)


def _gelu_backward_vjp(gg, out, g, x, approximate="none"):
    gg_g = gelu_backward(gg, x, approximate) if g is not None else None
    gg_x = gg * g * _second_derivative(x, approximate) if x is not None else None
    return (gg_g, gg_x)


GELU_BACKWARD = defprim("gelu_backward", _gelu_backward_impl, _ew_rule("gelu_backward"),
                        _gelu_backward_vjp, kind="elementwise", scalar=_gelu_backward_scalar,
                        promote=True, int_to_float=True, grad_name="GeluBackwardBackward0")


def _check(approximate):
    if approximate not in APPROXIMATE:
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


@takes("x:input")
def gelu(x, approximate: str = "none"):
    """GELU of `x`; ``approximate="tanh"`` is the tanh approximation (PyTorch's)."""
    _check(approximate)
    return bind(GELU, x, approximate=approximate)


def gelu_backward(g, x, approximate: str = "none"):
    """``g * gelu'(x)``: GELU's input gradient for the output gradient `g`."""
    _check(approximate)
    return bind(GELU_BACKWARD, g, x, approximate=approximate)
