"""Op record for gelu_backward (tracejit/ops/gelu_prim.py): GELU's input gradient as its
own primitive, checked like every op (forward vs numpy, float64 finite differences and
second derivatives, PyTorch's ``aten.gelu_backward``, traced and compiled runs). ``gelu``
itself has its records in tests/opdb.py."""
from __future__ import annotations

import math

import numpy as np

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.gelu_prim import gelu_backward

_S = math.sqrt(2.0 / math.pi)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _ref(g, x, approximate="none"):
    if approximate == "tanh":
        t = np.tanh(_S * (x + 0.044715 * x ** 3))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _S * (1 + 3 * 0.044715 * x * x))
    return g * (0.5 * (1 + _erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


def _f(m, g, x, **kw):
    if m.__name__ == "torch":
        return m.ops.aten.gelu_backward(g, x, **kw)
    return gelu_backward(g, x, **kw)


def _samples(d, r):
    return [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d, -3.0, 3.0)), {}),
            Sample((arr(r, (5,), d), arr(r, (5,), d, -3.0, 3.0)), {"approximate": "tanh"}),
            Sample((arr(r, (2, 3), d), arr(r, (3,), d)), {"approximate": "tanh"}, desc="broadcast x")]


register("gelu_backward", _f, _ref, _samples, dtypes=FLOATS)
