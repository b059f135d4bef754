"""LeakyReLU as one elementwise primitive, and its derivative as another.

Why a primitive: the composite ``where(x > 0, x, x * slope)`` is three passes forward and
about five backward, where PyTorch makes one each way. As one record with a scalar rule a
large eager call is one kernel pass, and the compiler fuses it like any elementwise op.

The gradient reads the input, as PyTorch's out-of-place LeakyReLU does, so the output may
be written in place after the op (for a slope >= 0, ``out > 0`` exactly where ``x > 0``:
the same mask; a negative slope keeps the composite; ``inplace=True`` goes through
`apply_inplace`, whose node reads the input's old value). Results are bitwise the composite's.
"""
from __future__ import annotations

from .elementwise import _ew_rule
from .eager import bind
from .registry import defprim
from .dtype_checks import takes

__all__ = ["leaky_relu", "leaky_relu_backward"]


def _leaky_relu_impl(xp, x, negative_slope=0.01):
    return xp.where(x > 0, x, x * negative_slope)


def _leaky_relu_scalar(e, x, negative_slope=0.01):
    return f"({x} if {x} > {e.const(0)} else {x} * {e.const(negative_slope)})"


LEAKY_RELU = defprim("leaky_relu", _leaky_relu_impl, _ew_rule("leaky_relu"),
                     lambda g, out, x, **p: (leaky_relu_backward(g, x, **p),),
                     kind="elementwise", scalar=_leaky_relu_scalar, promote=True, int_to_float=True,
                     save=lambda rq: (0,), grad_name="LeakyReluBackward0", extra={"passes": 3})


def _leaky_relu_backward_impl(xp, g, y, negative_slope=0.01):
    return xp.where(y > 0, g, g * negative_slope)


def _leaky_relu_backward_scalar(e, g, y, negative_slope=0.01):
    return f"({g} if {y} > {e.const(0)} else {g} * {e.const(negative_slope)})"


def _leaky_relu_backward_vjp(gg, out, g, y, negative_slope=0.01):
    # d/dg: the same slopes; the mask's own derivative is 0 almost everywhere (zeros, as
    # relu_backward gives, so eager and compiled gradients agree)
    from .creation import zeros_like
    return (leaky_relu_backward(gg, y, negative_slope) if y is not None else None,
            zeros_like(y) if y is not None else None)


LEAKY_RELU_BACKWARD = defprim("leaky_relu_backward", _leaky_relu_backward_impl,
                              _ew_rule("leaky_relu_backward"), _leaky_relu_backward_vjp,
                              kind="elementwise", scalar=_leaky_relu_backward_scalar, promote=True,
                              save=lambda rq: (1,), grad_name="LeakyReluBackwardBackward0", extra={"passes": 3})


@takes("x:input")
def leaky_relu(x, negative_slope: float = 0.01):
    """``x`` where positive, else ``negative_slope * x``; `negative_slope` >= 0."""
    return bind(LEAKY_RELU, x, negative_slope=float(negative_slope))


def leaky_relu_backward(g, y, negative_slope: float = 0.01):
    """LeakyReLU's input gradient for the output gradient `g`, from its input or output `y`
    (positive at the same places for a slope >= 0)."""
    return bind(LEAKY_RELU_BACKWARD, g, y, negative_slope=float(negative_slope))
