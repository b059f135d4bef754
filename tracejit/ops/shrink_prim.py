"""Softshrink, hardshrink and threshold as elementwise primitives, with one shared derivative.

Why primitives: as composites of ``where``/``abs``/comparisons each was three to five numpy
passes forward and more backward, where PyTorch makes one each way. As one record with a
scalar rule a large eager call is one kernel pass, and the compiler fuses it like any
elementwise op.

All three pass the gradient through outside a closed band ``[lo, hi]`` of the input and give
zero inside it (softshrink and hardshrink: ``[-lambd, lambd]``; threshold: ``[-inf,
threshold]``), so one primitive, `band_backward`, is every derivative. NaN inputs follow
PyTorch: they pass forward as NaN and take the gradient.
"""
from __future__ import annotations

from .elementwise import _ew_rule
from .eager import bind
from .registry import defprim

__all__ = ["softshrink", "hardshrink", "threshold", "band_backward"]


def _band_grad(g, x, lo, hi):
    return (band_backward(g, x, lo=lo, hi=hi),)


def _softshrink_impl(xp, x, lambd=0.5):
    # x - x in the band: +0.0 as PyTorch's vector kernel, and a NaN passes
    return x - xp.clip(x, -lambd, lambd)


def _softshrink_scalar(e, x, lambd=0.5):
    lam = e.const(lambd)
    return f"({x} - {lam} if {x} > {lam} else ({x} + {lam} if {x} < -{lam} else {x} - {x}))"


SOFTSHRINK = defprim("softshrink", _softshrink_impl, _ew_rule("softshrink", float_only=True),
                     lambda g, out, x, lambd=0.5: _band_grad(g, x, -lambd, lambd),
                     kind="elementwise", scalar=_softshrink_scalar, promote=True,
                     save=lambda rq: (0,), grad_name="SoftshrinkBackward0")


def _hardshrink_impl(xp, x, lambd=0.5):
    return xp.where((x >= -lambd) & (x <= lambd), xp.zeros((), x.dtype), x)


def _hardshrink_scalar(e, x, lambd=0.5):
    lam, z = e.const(lambd), e.const(0)
    return f"(({z} if {x} <= {lam} else {x}) if {x} >= -{lam} else {x})"


HARDSHRINK = defprim("hardshrink", _hardshrink_impl, _ew_rule("hardshrink", float_only=True),
                     lambda g, out, x, lambd=0.5: _band_grad(g, x, -lambd, lambd),
                     kind="elementwise", scalar=_hardshrink_scalar, promote=True,
                     save=lambda rq: (0,), grad_name="HardshrinkBackward0")


def _threshold_impl(xp, x, threshold=0.0, value=0.0):
    return xp.where(x <= threshold, xp.asarray(value, x.dtype), x)


def _threshold_scalar(e, x, threshold=0.0, value=0.0):
    return f"({e.const(value)} if {x} <= {e.const(threshold)} else {x})"


THRESHOLD = defprim("threshold", _threshold_impl, _ew_rule("threshold", float_only=True),
                    lambda g, out, x, threshold=0.0, value=0.0:
                        _band_grad(g, x, float("-inf"), threshold),
                    kind="elementwise", scalar=_threshold_scalar, promote=True,
                    save=lambda rq: (0,), grad_name="ThresholdBackward0")


def _band_backward_impl(xp, g, x, lo=0.0, hi=0.0):
    return xp.where((x >= lo) & (x <= hi), xp.zeros((), g.dtype), g)


def _band_backward_scalar(e, g, x, lo=0.0, hi=0.0):
    # nested conditionals, not `and`: a NaN input fails both tests and keeps the gradient
    z = e.const(0)
    return f"(({z} if {x} <= {e.const(hi)} else {g}) if {x} >= {e.const(lo)} else {g})"


def _band_backward_vjp(gg, out, g, x, lo=0.0, hi=0.0):
    # d/dg: the same mask; the mask's own derivative is 0 almost everywhere
    from .creation import zeros_like
    return (band_backward(gg, x, lo=lo, hi=hi) if x is not None else None,
            zeros_like(x) if x is not None else None)


BAND_BACKWARD = defprim("band_backward", _band_backward_impl, _ew_rule("band_backward"),
                        _band_backward_vjp, kind="elementwise", scalar=_band_backward_scalar,
                        promote=True, save=lambda rq: (1,), grad_name="ThresholdBackwardBackward0")


def softshrink(x, lambd: float = 0.5):
    """``x - lambd`` above `lambd`, ``x + lambd`` below ``-lambd``, else 0 (floating `x`)."""
    return bind(SOFTSHRINK, x, lambd=float(lambd))


def hardshrink(x, lambd: float = 0.5):
    """`x` outside ``[-lambd, lambd]``, else 0 (floating `x`)."""
    return bind(HARDSHRINK, x, lambd=float(lambd))


def threshold(x, threshold: float, value: float):
    """`x` above `threshold`, else `value` (floating `x`)."""
    return bind(THRESHOLD, x, threshold=float(threshold), value=float(value))


def band_backward(g, x, lo: float, hi: float):
    """The gradient `g` where `x` is outside ``[lo, hi]`` (or NaN), else 0."""
    return bind(BAND_BACKWARD, g, x, lo=float(lo), hi=float(hi))
