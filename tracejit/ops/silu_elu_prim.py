"""SiLU and ELU (with SELU and CELU) as one elementwise primitive each, and their
derivatives as others.

Why primitives: as composites, ``x * sigmoid(x)`` is two passes forward and five backward,
and ELU's ``where(x <= 0, alpha * expm1(min(x, 0)), x)`` four forward and about eight
backward, where PyTorch makes one each way. As one record with a scalar rule a large
eager call is one kernel pass (eager ELU fwd+bwd on 4M float32 elements ran 4x PyTorch's
time as the composite), and the compiler fuses it like any elementwise op.

ELU's record is PyTorch's ``elu(x, alpha, scale, input_scale)``: ``scale * x`` where
x > 0, else ``alpha * scale * expm1(x * input_scale)``; SELU and CELU are its parameters.
The derivatives are PyTorch's ``silu_backward`` and ``elu_backward`` formulas, and their
own VJPs are written with tracejit ops, so higher-order gradients work.
"""
from __future__ import annotations

from .elementwise import _ew_rule, exp, sigmoid, sigmoid_form, where
from .eager import bind
from .registry import defprim

__all__ = ["silu", "silu_backward", "elu", "elu_backward"]


# ---------------------------------------------------------------- SiLU
def _silu_impl(xp, x):
    return x * sigmoid_form(xp, x)


def _silu_scalar(e, x):
    return f"({x} * {e.call('sigmoid', x)})"


SILU = defprim("silu", _silu_impl, _ew_rule("silu"),
               lambda g, out, x: (silu_backward(g, x),),
               kind="elementwise", scalar=_silu_scalar, promote=True, int_to_float=True,
               save=lambda rq: (0,), grad_name="SiluBackward0", extra={"passes": 5})


def _silu_backward_impl(xp, g, x):
    s = sigmoid_form(xp, x)
    return g * (s * (1.0 + x * (1.0 - s)))


def _silu_backward_scalar(e, g, x):
    s = e.call("sigmoid", x)
    one = e.const(1.0)
    return f"({g} * ({s} * ({one} + {x} * ({one} - {s}))))"


def _silu_backward_vjp(gg, out, g, x):
    # d/dg: silu'(x) again; d/dx: g * silu''(x), silu'' = s (1 - s) (2 + x (1 - 2 s))
    gg_g = silu_backward(gg, x) if g is not None else None
    gg_x = None
    if x is not None:
        s = sigmoid(x)
        gg_x = gg * g * (s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s)))
    return (gg_g, gg_x)


SILU_BACKWARD = defprim("silu_backward", _silu_backward_impl, _ew_rule("silu_backward"),
                        _silu_backward_vjp, kind="elementwise", scalar=_silu_backward_scalar,
                        promote=True, int_to_float=True, grad_name="SiluBackwardBackward0",
                        extra={"passes": 9})


def silu(x):
    """``x * sigmoid(x)``."""
    return bind(SILU, x)


def silu_backward(g, x):
    """``g * silu'(x)``: SiLU's input gradient for the output gradient `g`."""
    return bind(SILU_BACKWARD, g, x)


# ---------------------------------------------------------------- ELU, SELU, CELU
def _elu_impl(xp, x, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = (alpha * scale) * xp.expm1(xp.minimum(x, 0.0) * input_scale)
    return xp.where(x <= 0, neg, x * scale)


def _elu_scalar(e, x, alpha=1.0, scale=1.0, input_scale=1.0):
    c = e.const
    neg = f"({c(alpha * scale)} * {e.call('expm1', f'({x} * {c(input_scale)})')})"
    return f"({neg} if {x} <= {c(0.0)} else {x} * {c(scale)})"


ELU = defprim("elu", _elu_impl, _ew_rule("elu", float_only=True),
              lambda g, out, x, **p: (elu_backward(g, x, **p),),
              kind="elementwise", scalar=_elu_scalar, promote=True,
              save=lambda rq: (0,), grad_name="EluBackward0", extra={"passes": 6})


def _elu_backward_impl(xp, g, x, alpha=1.0, scale=1.0, input_scale=1.0):
    # (a nan takes the positive side, g * scale, as PyTorch's scalar loop; its vector
    # loop, which runs most elements of a long row, gives nan there)
    slope = (input_scale * alpha * scale) * xp.exp(xp.minimum(x, 0.0) * input_scale)
    return xp.where(x <= 0, g * slope, g * scale)


def _elu_backward_scalar(e, g, x, alpha=1.0, scale=1.0, input_scale=1.0):
    c = e.const
    slope = f"({c(input_scale * alpha * scale)} * {e.call('exp', f'({x} * {c(input_scale)})')})"
    return f"({g} * {slope} if {x} <= {c(0.0)} else {g} * {c(scale)})"


def _elu_backward_vjp(gg, out, g, x, alpha=1.0, scale=1.0, input_scale=1.0):
    # d/dg: elu'(x) again; d/dx: g * elu''(x), input_scale**2 * alpha * scale * exp(x *
    # input_scale) where x < 0 (0 at x = 0, where the first derivative is still the
    # negative side's: PyTorch's elu_double_backward)
    p = {"alpha": alpha, "scale": scale, "input_scale": input_scale}
    gg_g = elu_backward(gg, x, **p) if g is not None else None
    gg_x = None
    if x is not None:
        curve = where(x < 0, (input_scale * input_scale * alpha * scale) * exp(x * input_scale), 0.0)
        gg_x = gg * g * curve   # (a product, not a select: a nan gg stays nan, as PyTorch's)
    return (gg_g, gg_x)


ELU_BACKWARD = defprim("elu_backward", _elu_backward_impl, _ew_rule("elu_backward"),
                       _elu_backward_vjp, kind="elementwise", scalar=_elu_backward_scalar,
                       promote=True, grad_name="EluBackwardBackward0", extra={"passes": 7})


def elu(x, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0):
    """``scale * x`` where x > 0, else ``alpha * scale * (exp(x * input_scale) - 1)``."""
    return bind(ELU, x, alpha=float(alpha), scale=float(scale), input_scale=float(input_scale))


def elu_backward(g, x, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0):
    """ELU's input gradient for the output gradient `g`, from the input `x`."""
    return bind(ELU_BACKWARD, g, x, alpha=float(alpha), scale=float(scale), input_scale=float(input_scale))
