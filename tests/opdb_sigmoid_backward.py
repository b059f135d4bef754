"""Op record for sigmoid_backward (tracejit/ops/elementwise.py): sigmoid's input gradient
``g * y * (1 - y)`` as its own primitive (PyTorch's ``aten.sigmoid_backward``), checked like
every op: forward vs numpy, float64 finite differences and second derivatives, PyTorch,
traced and compiled runs."""
from __future__ import annotations

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.elementwise import sigmoid_backward


def _ref(g, y):
    return g * y * (1 - y)


def _f(m, g, y):
    if m.__name__ == "torch":
        return m.ops.aten.sigmoid_backward(g, y)
    return sigmoid_backward(g, y)


def _samples(d, r):
    return [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d, 0.01, 0.99))),
            Sample((arr(r, (5,), d), arr(r, (5,), d, 0.01, 0.99))),
            Sample((arr(r, (2, 3), d), arr(r, (3,), d, 0.01, 0.99)), desc="broadcast y")]


register("sigmoid_backward", _f, _ref, _samples, dtypes=FLOATS)
