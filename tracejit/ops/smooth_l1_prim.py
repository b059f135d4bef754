"""The smooth L1 and Huber losses' pointwise terms as one elementwise primitive, and their
derivative as another.

Why a primitive: as a composite the term is six passes forward (abs, a comparison, two
products, a difference, a select) and about nine backward, where PyTorch makes one each
way; eager smooth_l1_loss fwd+bwd ran ~2.9x PyTorch's time. As one record with a scalar
rule a large eager call is one kernel pass each way, and the compiler fuses it.

``smooth_l1_term(d, beta)`` of the difference d = input - target is PyTorch's
``|d| < beta ? 0.5 * d * d / beta : |d| - 0.5 * beta``; with ``huber=True`` it is
``|d| < beta ? 0.5 * d * d : beta * (|d| - 0.5 * beta)`` (Huber's delta), each in PyTorch's
order of operations. The derivative is PyTorch's smooth_l1/huber backward without the
reduction's factor; its own VJP is written with tracejit ops.
"""
from __future__ import annotations

from .elementwise import _ew_rule, abs as _abs, where
from .eager import bind
from .registry import defprim

__all__ = ["smooth_l1_term", "smooth_l1_term_backward"]


def _term_impl(xp, d, beta=1.0, huber=False):
    z = xp.abs(d)
    if huber:
        return xp.where(z < beta, 0.5 * d * d, beta * (z - 0.5 * beta))
    return xp.where(z < beta, 0.5 * d * d / beta, z - 0.5 * beta)


def _term_scalar(e, d, beta=1.0, huber=False):
    c = e.const
    z = f"abs({d})"
    if huber:
        return f"({c(0.5)} * {d} * {d} if {z} < {c(beta)} else {c(beta)} * ({z} - {c(0.5 * beta)}))"
    return f"({c(0.5)} * {d} * {d} / {c(beta)} if {z} < {c(beta)} else {z} - {c(0.5 * beta)})"


SMOOTH_L1_TERM = defprim("smooth_l1_term", _term_impl, _ew_rule("smooth_l1_term", float_only=True),
                         lambda g, out, d, **p: (smooth_l1_term_backward(g, d, **p),),
                         kind="elementwise", scalar=_term_scalar, promote=True,
                         save=lambda rq: (0,), grad_name="SmoothL1LossBackward0")


def _backward_impl(xp, g, d, beta=1.0, huber=False):
    if huber:   # (PyTorch's huber_loss_backward: the outer sides from |d| >= delta)
        return xp.where(d <= -beta, -beta * g, xp.where(d >= beta, beta * g, d * g))
    return xp.where(d < -beta, -g, xp.where(d > beta, g, d * g / beta))


def _backward_scalar(e, g, d, beta=1.0, huber=False):
    c = e.const
    if huber:
        return (f"({c(-beta)} * {g} if {d} <= {c(-beta)} else "
                f"({c(beta)} * {g} if {d} >= {c(beta)} else {d} * {g}))")
    return f"(-{g} if {d} < {c(-beta)} else ({g} if {d} > {c(beta)} else {d} * {g} / {c(beta)}))"


def _backward_vjp(gg, out, g, d, beta=1.0, huber=False):
    # d/dg: the same slopes; d/dd: the quadratic part's curvature (1 / beta, Huber's 1)
    p = {"beta": beta, "huber": huber}
    inside = _abs(d) < beta
    curve = gg * g if huber else gg * g / beta
    return (smooth_l1_term_backward(gg, d, **p) if g is not None else None,
            where(inside, curve, 0.0) if d is not None else None)


SMOOTH_L1_TERM_BACKWARD = defprim("smooth_l1_term_backward", _backward_impl,
                                  _ew_rule("smooth_l1_term_backward"), _backward_vjp,
                                  kind="elementwise", scalar=_backward_scalar, promote=True,
                                  grad_name="SmoothL1LossBackwardBackward0")


def smooth_l1_term(d, beta: float = 1.0, huber: bool = False):
    """The smooth L1 (Huber with `huber`) loss of each difference `d`, before reduction."""
    return bind(SMOOTH_L1_TERM, d, beta=float(beta), huber=bool(huber))


def smooth_l1_term_backward(g, d, beta: float = 1.0, huber: bool = False):
    """`smooth_l1_term`'s input gradient for the output gradient `g`."""
    return bind(SMOOTH_L1_TERM_BACKWARD, g, d, beta=float(beta), huber=bool(huber))
