"""Op record for softmax_backward (tracejit/ops/softmax_prim.py): softmax's input gradient
as its own primitive (eager softmax is the ``softmax`` primitive; its records are the
``softmax`` ones in tests/opdb.py). Checked like every op: forward vs numpy, float64 finite
differences and second derivatives, PyTorch's ``aten._softmax_backward_data``, traced and
compiled runs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.softmax_prim import softmax_backward


def _ref(g, y, dim):
    return y * (g - (g * y).sum(axis=dim, keepdims=True))


def _f(m, g, y, dim):
    if m.__name__ == "torch":
        return m.ops.aten._softmax_backward_data(g, y, dim, y.dtype)
    return softmax_backward(g, y, dim)


def _samples(d, r):
    def probs(shape, dim):
        e = np.exp(r.uniform(-2.0, 2.0, shape))
        return (e / e.sum(axis=dim, keepdims=True)).astype(d.np)
    return [Sample((arr(r, (3, 5), d), probs((3, 5), 1)), {"dim": 1}),
            Sample((arr(r, (2, 4, 3), d), probs((2, 4, 3), 1)), {"dim": 1}, desc="middle dim"),
            Sample((arr(r, (4,), d), probs((4,), 0)), {"dim": 0}, desc="1-D")]


register("softmax_backward", _f, _ref, _samples, dtypes=FLOATS)


# softmax(x * scale + mask): attention's scores, scale and additive mask as one op
# (ops/attention.py calls it so); the mask broadcasts (its gradient is summed back).
def _scaled_ref(x, mask, dim, scale):
    z = x * scale + mask
    e = np.exp(z - z.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _scaled(m, x, mask, dim, scale):
    if m.__name__ == "torch":
        return m.softmax(x * scale + mask, dim)
    from tracejit.ops.softmax_prim import softmax
    return softmax(x, dim, scale, mask)


def _scaled_samples(d, r):
    return [Sample((arr(r, (2, 3, 4, 5), d), arr(r, (4, 5), d)), {"dim": 3, "scale": 0.125},
                   desc="(L, S) mask over batch and heads"),
            Sample((arr(r, (2, 3, 4, 5), d), arr(r, (2, 1, 1, 5), d)), {"dim": 3, "scale": 2.0},
                   desc="key-padding-shaped mask"),
            Sample((arr(r, (3, 17), d), arr(r, (3, 17), d)), {"dim": 1, "scale": 1.0},
                   desc="full mask, no scale, 17 columns (kernel tail)"),
            Sample((arr(r, (4, 6), d), arr(r, (4, 6), d)), {"dim": 0, "scale": 0.5},
                   desc="first dim (numpy form)")]


register("softmax.scaled_masked", _scaled, _scaled_ref, _scaled_samples, dtypes=FLOATS)
