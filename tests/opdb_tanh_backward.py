"""Op record for tanh_backward (tracejit/ops/elementwise.py): tanh's input gradient
``g * (1 - y*y)`` as its own primitive (PyTorch's ``aten.tanh_backward``), checked like
every op: forward vs numpy, float64 finite differences and second derivatives, PyTorch,
traced and compiled runs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.elementwise import tanh_backward


def _ref(g, y):
    return g * (1 - y * y)


def _f(m, g, y):
    if m.__name__ == "torch":
        return m.ops.aten.tanh_backward(g, y)
    return tanh_backward(g, y)


def _samples(d, r):
    return [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d, -0.99, 0.99))),
            Sample((arr(r, (5,), d), arr(r, (5,), d, -0.99, 0.99))),
            Sample((arr(r, (2, 3), d), arr(r, (3,), d, -0.99, 0.99)), desc="broadcast y")]


register("tanh_backward", _f, _ref, _samples, dtypes=FLOATS)
