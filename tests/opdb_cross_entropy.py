"""Op record for cross_entropy_backward (tracejit/ops/cross_entropy_prim.py): the input
gradient of cross-entropy over class indices as its own primitive (the forward primitive
is what ``cross_entropy`` runs for (N, C) logits: the ``cross_entropy`` records in
tests/opdb.py). Checked like every op: forward vs numpy, float64 finite differences and
second derivatives, PyTorch (the same gradient written with its ops), traced and compiled
runs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, idx, register

from tracejit.ops.cross_entropy_prim import cross_entropy_backward


def _ref(g, x, t, ignore_index=-100, reduction="mean"):
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    p[np.arange(len(t)), safe] -= 1.0
    r = (g.reshape(-1, 1) * valid[:, None]).astype(x.dtype)
    if reduction == "mean":
        r = r / valid.sum()
    return (p * r).astype(x.dtype)


def _f(m, g, x, t, ignore_index=-100, reduction="mean"):
    if m.__name__ == "torch":
        valid = t != ignore_index
        onehot = m.nn.functional.one_hot(m.where(valid, t, 0), x.shape[1]).to(x.dtype)
        r = g.reshape(-1, 1) * valid[:, None].to(x.dtype)
        if reduction == "mean":
            r = r / valid.sum()
        return (m.softmax(x, 1) - onehot) * r
    return cross_entropy_backward(g, x, t, ignore_index, reduction)


def _samples(d, r):
    t = idx(r, (6,), 4)
    t[2] = -100
    custom = np.array([0, 3, 3, 1, 2], np.int64)
    return [Sample((arr(r, (), d), arr(r, (5, 3), d), idx(r, (5,), 3)), {}, desc="mean"),
            Sample((arr(r, (), d), arr(r, (4, 3), d), idx(r, (4,), 3)), {"reduction": "sum"}, desc="sum"),
            Sample((arr(r, (4,), d), arr(r, (4, 17), d), idx(r, (4,), 17)), {"reduction": "none"},
                   desc="none, 17 classes"),
            Sample((arr(r, (), d), arr(r, (6, 4), d), t), {}, desc="an ignored row"),
            Sample((arr(r, (5,), d), arr(r, (5, 4), d), custom), {"ignore_index": 3, "reduction": "none"},
                   desc="custom ignore_index")]


register("cross_entropy_backward", _f, _ref, _samples, dtypes=FLOATS)
