"""Op record for relu_backward (tracejit/ops/elementwise.py): ReLU's input gradient
``where(y > 0, g, 0)`` as its own primitive (PyTorch's ``aten.threshold_backward(g, y, 0)``),
checked like every op: forward vs numpy, float64 finite differences, PyTorch, traced and
compiled runs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.elementwise import relu_backward


def _ref(g, y):
    return np.where(y > 0, g, 0).astype(g.dtype)


def _f(m, g, y):
    if m.__name__ == "torch":
        return m.ops.aten.threshold_backward(g, y, 0)
    return relu_backward(g, y)


def _samples(d, r):
    # y away from 0: the mask must not flip under the finite-difference probes (y is an
    # input whose derivative is 0 almost everywhere).
    def away(shape):
        y = arr(r, shape, d, 0.1, 1.0)
        return y * np.where(r.random(shape) < 0.5, -1, 1).astype(y.dtype)
    return [Sample((arr(r, (3, 4), d), away((3, 4)))),
            Sample((arr(r, (5,), d), away((5,)))),
            Sample((arr(r, (2, 3), d), away((3,))), desc="broadcast y")]


register("relu_backward", _f, _ref, _samples, dtypes=FLOATS)
