"""Op record for clamp_backward (tracejit/ops/elementwise.py): clamp's input gradient,
``g where min <= a <= max else 0``, as its own primitive (one op and one kernel pass
where the composite was a comparison or two, a logical_and and a select), checked like
every op: forward vs numpy, float64 finite differences (linear in g; a only selects, so
no gradient is taken with respect to it), PyTorch (the same where), traced and compiled
runs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.elementwise import clamp_backward


def _ref(g, a, min=None, max=None):
    keep = np.ones(a.shape, bool)
    if min is not None:
        keep &= a >= min
    if max is not None:
        keep &= a <= max
    return np.where(keep, g, 0.0)


def _f(m, g, a, min=None, max=None):
    if m.__name__ == "torch":
        keep = m.ones_like(a, dtype=m.bool)
        if min is not None:
            keep = keep & (a >= min)
        if max is not None:
            keep = keep & (a <= max)
        return m.where(keep, g, m.zeros((), dtype=g.dtype))
    return clamp_backward(g, a, min, max)


def _samples(d, r):
    edge = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, -0.5], np.float64)  # on the bounds too
    return [Sample((arr(r, (3, 4), d), arr(r, (3, 4), d)), {"min": 0}, grad=(0,), desc="relu"),
            Sample((arr(r, (5,), d), arr(r, (5,), d)), {"max": 0.5}, grad=(0,), desc="max only"),
            Sample((arr(r, (2, 3), d), arr(r, (2, 3), d)), {"min": -1.0, "max": 1.0}, grad=(0,),
                   desc="both bounds"),
            Sample((arr(r, (6,), d), edge.astype(arr(r, (1,), d).dtype)), {"min": 0.0, "max": 1.0},
                   grad=(0,), desc="on the bounds")]


register("clamp_backward", _f, _ref, _samples, dtypes=FLOATS)
