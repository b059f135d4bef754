"""Op record for pow_backward (tracejit/ops/elementwise.py): pow's input gradient for a
constant exponent, ``(g * b) * a ** (b - 1)``, as its own primitive (one kernel pass where
the composite made three), checked like every op: forward vs numpy, float64 finite
differences and second derivatives, PyTorch (the composite PyTorch's pow_backward
computes), traced and compiled runs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, pos, register

from tracejit.ops.elementwise import pow_backward


def _ref(g, a, exponent):
    return g * exponent * a ** (exponent - 1)


def _f(m, g, a, exponent):
    if m.__name__ == "torch":
        return g * exponent * a.pow(exponent - 1)
    return pow_backward(g, a, exponent)


def _samples(d, r):
    return [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d)), {"exponent": 3}, desc="cube"),
            Sample((arr(r, (5,), d), arr(r, (5,), d)), {"exponent": 2}, desc="square"),
            Sample((arr(r, (2, 3), d), arr(r, (2, 3), d)), {"exponent": 1}, desc="b = 1"),
            Sample((arr(r, (2, 3), d), pos(r, (2, 3), d)), {"exponent": 2.5}, desc="fractional"),
            Sample((arr(r, (4,), d), pos(r, (4,), d)), {"exponent": -2.0}, desc="negative"),
            Sample((arr(r, (2, 3), d), arr(r, (3,), d)), {"exponent": 3}, desc="broadcast a")]


register("pow_backward", _f, _ref, _samples, dtypes=FLOATS)
