"""Softplus as one elementwise primitive, and its derivative as another.

Why a primitive: the composite ``where(bx > threshold, x, (max(bx, 0) + log1p(exp(-|bx|))) / beta)``
is nine recorded ops forward and about as many backward, where PyTorch runs one kernel each
way (a small eager call: ~10x PyTorch's time). As one record with a scalar rule a large eager
call is one kernel pass, and the compiler fuses it like any elementwise op.

The forward's form is the composite's (so values are bitwise the same); the gradient is
``g * sigmoid(beta * x)`` below the threshold and ``g`` above it, from the input, as
PyTorch's ``softplus_backward``.
"""
from __future__ import annotations

from .elementwise import _ew_rule, ge, mul, sigmoid, sigmoid_form, where
from .eager import bind
from .registry import defprim
from .dtype_checks import takes

__all__ = ["softplus", "softplus_backward"]


def _scaled(x, beta):
    return x if beta == 1.0 else x * beta


def _softplus_impl(xp, x, beta=1.0, threshold=20.0):
    # log(1 + e^z) = max(z, 0) + log1p(e^-|z|) never overflows
    bx = _scaled(x, beta)
    sp = xp.maximum(bx, 0.0) + xp.log1p(xp.exp(-xp.abs(bx)))
    return xp.where(bx > threshold, x, sp if beta == 1.0 else sp / beta)


def _bx(e, x, beta):
    return x if beta == 1.0 else f"({x} * {e.const(beta)})"


def _softplus_scalar(e, x, beta=1.0, threshold=20.0):
    bx = _bx(e, x, beta)
    sp = e.call("softplus", bx) if beta == 1.0 else f"({e.call('softplus', bx)} / {e.const(beta)})"
    return f"({x} if {bx} > {e.const(threshold)} else {sp})"


SOFTPLUS = defprim("softplus", _softplus_impl, _ew_rule("softplus", float_only=True),
                   lambda g, out, x, **p: (softplus_backward(g, x, **p),),
                   kind="elementwise", scalar=_softplus_scalar, promote=True,
                   save=lambda rq: (0,), grad_name="SoftplusBackward0", extra={"passes": 8})


def _softplus_backward_impl(xp, g, x, beta=1.0, threshold=20.0):
    bx = _scaled(x, beta)
    return xp.where(bx > threshold, g, g * sigmoid_form(xp, bx).astype(g.dtype, copy=False))


def _softplus_backward_scalar(e, g, x, beta=1.0, threshold=20.0):
    bx = _bx(e, x, beta)
    return f"({g} if {bx} > {e.const(threshold)} else {g} * {e.call('sigmoid', bx)})"


def _softplus_backward_vjp(gg, out, g, x, beta=1.0, threshold=20.0):
    # d/dg: the same factor; d/dx: g beta s (1 - s) below the threshold (0 at it, as PyTorch's)
    gx = None
    if g is not None and x is not None:
        bx = _scaled(x, beta)
        s = sigmoid(bx)
        gx = where(ge(bx, threshold), 0.0, mul(gg * g, s * (1.0 - s)) * beta)
    return (softplus_backward(gg, x, beta, threshold) if x is not None else None, gx)


SOFTPLUS_BACKWARD = defprim("softplus_backward", _softplus_backward_impl,
                            _ew_rule("softplus_backward"), _softplus_backward_vjp,
                            kind="elementwise", scalar=_softplus_backward_scalar, promote=True,
                            save=lambda rq: (0, 1) if rq[1] else (1,),
                            grad_name="SoftplusBackwardBackward0", extra={"passes": 7})


@takes("x:input")
def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta * x)) / beta, and `x` itself where ``beta * x > threshold``."""
    return bind(SOFTPLUS, x, beta=float(beta), threshold=float(threshold))


def softplus_backward(g, x, beta: float = 1.0, threshold: float = 20.0):
    """Softplus's input gradient for the output gradient `g`, from its input `x`."""
    return bind(SOFTPLUS_BACKWARD, g, x, beta=float(beta), threshold=float(threshold))
