"""Hardsigmoid and hardswish as one elementwise primitive each, with PyTorch's gradients.

Why primitives: PyTorch's gradients use strict bounds (0 at x = -3 and 3 for hardsigmoid,
0 and 1 for hardswish), which clamp's would not give, and one record is one pass computed
as PyTorch's kernels compute it (``min(max(x + 3, 0), 6) / 6``: the same rounding). The
gradients are written with `where`, so second derivatives come for free.
"""
from __future__ import annotations

from .eager import bind
from .elementwise import _ew_rule, where
from .registry import defprim

__all__ = ["hardsigmoid", "hardswish", "hardswish_backward"]

_SIXTH = 1.0 / 6.0


def _relu6_of_shift(xp, x):
    # min(max(x + 3, 0), 6), as PyTorch's kernels (numpy's maximum and minimum keep a nan)
    return xp.minimum(xp.maximum(x + 3.0, 0.0), 6.0)


def _hardsigmoid_impl(xp, x):
    return _relu6_of_shift(xp, x) / 6.0


def _relu6_of_shift_expr(e, x) -> str:
    u = f"({x} + {e.const(3.0)})"
    return f"({e.const(0.0)} if {u} < {e.const(0.0)} else ({e.const(6.0)} if {u} > {e.const(6.0)} else {u}))"


def _hardsigmoid_scalar(e, x) -> str:
    return f"({_relu6_of_shift_expr(e, x)} / {e.const(6.0)})"


def _hardsigmoid_vjp(g, out, x):
    # PyTorch's hardsigmoid_backward: strict bounds, none at a nan
    return (where((x > -3.0) & (x < 3.0), g * _SIXTH, 0.0),)


def _hardswish_impl(xp, x):
    return x * _relu6_of_shift(xp, x) / 6.0


def _hardswish_scalar(e, x) -> str:
    return f"({x} * {_relu6_of_shift_expr(e, x)} / {e.const(6.0)})"


def _hardswish_backward_impl(xp, g, x):
    # PyTorch's hardswish_backward: 0 up to -3, x / 3 + 1/2 inside, 1 from 3 on (a nan
    # gets the inside formula's nan, as its vectorized kernel gives); a half x computes in
    # float32, as every elementwise record (x / 3 + 1/2 cancels near -1.5: rounded in
    # between, it lost ~10 bits of float16)
    return xp.where(x <= -3.0, 0.0, xp.where(x >= 3.0, g, g * (x / 3.0 + 0.5)))


def _hardswish_backward_scalar(e, g, x) -> str:
    c = e.const
    inside = f"{g} * ({x} / {c(3.0)} + {c(0.5)})"
    return f"({c(0.0)} if {x} <= {c(-3.0)} else ({g} if {x} >= {c(3.0)} else {inside}))"


def _hardswish_backward_vjp(gg, out, g, x):
    # d/dg: the same slopes; d/dx: g / 3 strictly inside (-3, 3)
    return (hardswish_backward(gg, x) if g is not None else None,
            where((x > -3.0) & (x < 3.0), gg * g / 3.0, 0.0) if x is not None else None)


HARDSWISH_BACKWARD = defprim("hardswish_backward", _hardswish_backward_impl, _ew_rule("hardswish_backward"),
                             _hardswish_backward_vjp, kind="elementwise", scalar=_hardswish_backward_scalar,
                             promote=True, grad_name="HardswishBackwardBackward0", extra={"passes": 8})


def _hardswish_vjp(g, out, x):
    return (hardswish_backward(g, x),)


def hardswish_backward(g, x):
    """Hardswish's input gradient for the output gradient `g`, from the input `x`."""
    return bind(HARDSWISH_BACKWARD, g, x)


HARDSIGMOID = defprim("hardsigmoid", _hardsigmoid_impl, _ew_rule("hardsigmoid", float_only=True),
                      _hardsigmoid_vjp, kind="elementwise", scalar=_hardsigmoid_scalar, promote=True,
                      save=lambda rq: (0,), grad_name="HardsigmoidBackward0", extra={"passes": 4})
HARDSWISH = defprim("hardswish", _hardswish_impl, _ew_rule("hardswish", float_only=True),
                    _hardswish_vjp, kind="elementwise", scalar=_hardswish_scalar, promote=True,
                    save=lambda rq: (0,), grad_name="HardswishBackward0", extra={"passes": 5})


def hardsigmoid(x):
    """clamp(x / 6 + 1/2, 0, 1), with PyTorch's gradient."""
    return bind(HARDSIGMOID, x)


def hardswish(x):
    """x * hardsigmoid(x), with PyTorch's gradient."""
    return bind(HARDSWISH, x)
