"""Op record for cross_entropy_backward (tracejit/ops/cross_entropy_prim.py): the input
gradient of cross-entropy over class indices as its own primitive (the forward primitive
is what ``cross_entropy`` runs for (N, C) logits: the ``cross_entropy`` records in
tests/opdb.py). Checked like every op: forward vs numpy, float64 finite differences and
second derivatives, PyTorch (the same gradient written with its ops), traced and compiled
runs. Also the losses whose targets are all `ignore_index` (an all-padding batch): PyTorch's
nan loss with a zero gradient, on every path."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, _ce, _nll, _np_ce, _np_nll, arr, idx, pos, register

from tracejit.ops.cross_entropy_prim import cross_entropy_backward


def _ref(g, x, t, ignore_index=-100, reduction="mean"):
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    p[np.arange(len(t)), safe] -= 1.0
    r = (g.reshape(-1, 1) * valid[:, None]).astype(x.dtype)
    if reduction == "mean":
        r = r / max(valid.sum(), 1)
    return (p * r).astype(x.dtype)


def _f(m, g, x, t, ignore_index=-100, reduction="mean"):
    if m.__name__ == "torch":
        valid = t != ignore_index
        onehot = m.nn.functional.one_hot(m.where(valid, t, 0), x.shape[1]).to(x.dtype)
        r = g.reshape(-1, 1) * valid[:, None].to(x.dtype)
        if reduction == "mean":
            r = r / valid.sum().clamp(min=1)
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
                   desc="custom ignore_index"),
            Sample((arr(r, (), d), arr(r, (3, 4), d), np.full(3, -100, np.int64)), {}, desc="every row ignored")]


register("cross_entropy_backward", _f, _ref, _samples, dtypes=FLOATS)


def _ignored(rng, n):
    return np.full(n, -100, np.int64)


# nan (mean) or 0 (sum) loss, zero gradient; finite differences of a nan are meaningless
register("cross_entropy.all_ignored", _ce, _np_ce,
         lambda d, r: [Sample((arr(r, (4, 3), d), _ignored(r, 4)), {}, check_fd=False, desc="mean"),
                       Sample((arr(r, (4, 3), d), _ignored(r, 4)), {"reduction": "sum"}, desc="sum"),
                       Sample((arr(r, (4, 3), d), _ignored(r, 4), pos(r, (3,), d)), {}, grad=(0,),
                              check_fd=False, desc="weight"),
                       Sample((arr(r, (4, 3), d), _ignored(r, 4)), {"label_smoothing": 0.2}, check_fd=False,
                              desc="label smoothing"),
                       Sample((arr(r, (2, 3, 4), d), np.full((2, 4), 1, np.int64)), {"ignore_index": 1},
                              check_fd=False, desc="(N, C, d), custom ignore_index")],
         dtypes=FLOATS)
register("nll_loss.all_ignored", _nll, _np_nll,
         lambda d, r: [Sample((arr(r, (5, 4), d), _ignored(r, 5)), {}, check_fd=False, desc="mean"),
                       Sample((arr(r, (5, 4), d), _ignored(r, 5), pos(r, (4,), d)), {}, grad=(0,),
                              check_fd=False, desc="weight")],
         dtypes=FLOATS)
