"""Op record for the Elman RNN layer (tracejit/ops/rnn_layer.py `rnn_layer_fm`: the
``rnn_layer`` / ``rnn_layer_backward`` primitives of tracejit/ops/rnn_prim.py). Checked like
every op: forward against a numpy loop, float64 finite differences (the fused backward)
and second derivatives (``rnn_layer_backward``'s VJP), traced and compiled runs. The
PyTorch side is the same recurrence written with torch ops."""
from __future__ import annotations

import numpy as np

from inputs import packed_hold as _hold
from opdb import FLOATS, Sample, arr, register

from tracejit.ops.rnn_layer import rnn_layer_fm


def _act(x, nonlinearity):
    return np.tanh(x) if nonlinearity == "tanh" else np.maximum(x, 0)


def _ref(gi, w, b, h0, reverse=False, nonlinearity="tanh", batch_sizes=None):
    L = gi.shape[0]
    outs = [None] * L
    h = h0
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        h = _hold(np, _act(gi[t].T + w @ h + b[:, None], nonlinearity), h, batch_sizes, t)
        outs[t] = h
    return np.stack(outs), h


def _f(m, gi, w, b, h0, reverse=False, nonlinearity="tanh", batch_sizes=None):
    if m.__name__ != "torch":
        return rnn_layer_fm(gi, w, h0, reverse, b, nonlinearity, batch_sizes)
    L = gi.shape[0]
    outs = [None] * L
    h = h0
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        pre = gi[t].T + w @ h + b[:, None]
        h = _hold(m, m.tanh(pre) if nonlinearity == "tanh" else m.relu(pre), h, batch_sizes, t)
        outs[t] = h
    return m.stack(outs), h


def _samples(d, r):
    H, N = 3, 2
    # relu samples keep pre-activations away from 0 (finite differences across the kink)
    # by a large positive bias on two units and a large negative one on the third
    relu_b = arr(r, (H,), d, 2.8, 3.2)
    relu_b[2] = -relu_b[2]
    return [Sample((arr(r, (4, N, H), d), arr(r, (H, H), d, -1.0, 1.0), arr(r, (H,), d),
                    arr(r, (H, N), d)), {}),
            Sample((arr(r, (3, N, H), d), arr(r, (H, H), d, -1.0, 1.0), arr(r, (H,), d),
                    arr(r, (H, N), d)), {"reverse": True}, desc="reverse"),
            Sample((arr(r, (3, N, H), d, -0.3, 0.3), arr(r, (H, H), d, -0.2, 0.2), relu_b,
                    arr(r, (H, N), d, -0.3, 0.3)), {"nonlinearity": "relu"}, desc="relu"),
            Sample((arr(r, (1, 1, 2), d), arr(r, (2, 2), d), arr(r, (2,), d), arr(r, (2, 1), d)), {},
                   desc="one step, batch 1")] + [
            Sample((arr(r, (4, 3, H), d), arr(r, (H, H), d, -1.0, 1.0), arr(r, (H,), d), arr(r, (H, 3), d)),
                   {"reverse": rev, "batch_sizes": (3, 2, 1, 1)}, desc="packed" + (", reverse" if rev else ""))
            for rev in (False, True)]


register("rnn_layer", _f, _ref, _samples, dtypes=FLOATS)
