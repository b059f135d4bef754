"""Op record for the eager GRU layer (tracejit/ops/gru_layer.py `gru_layer_fm`: the
``gru_layer`` / ``gru_layer_backward`` primitives of tracejit/ops/gru_prim.py made
differentiable). Checked like every op: forward against a numpy loop, float64 finite
differences (the fused backward) and second derivatives (``gru_layer_backward``'s VJP),
traced and compiled runs. The PyTorch side is the same recurrence written with torch ops."""
from __future__ import annotations

import numpy as np

from inputs import packed_hold as _hold
from opdb import FLOATS, Sample, arr, register

from tracejit.ops.gru_layer import gru_layer_fm


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _ref(gi, w, b, h0, reverse=False, batch_sizes=None):
    L, H = gi.shape[0], w.shape[1]
    outs = [None] * L
    h = h0
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        g, m = gi[t].T, w @ h + b[:, None]
        r, z = _sig(g[:H] + m[:H]), _sig(g[H:2 * H] + m[H:2 * H])
        n = np.tanh(g[2 * H:] + r * m[2 * H:])
        h = _hold(np, n + z * (h - n), h, batch_sizes, t)
        outs[t] = h
    return np.stack(outs), h


def _f(m, gi, w, b, h0, reverse=False, batch_sizes=None):
    if m.__name__ != "torch":
        return gru_layer_fm(gi, w, h0, reverse, b, batch_sizes)
    L, H = gi.shape[0], w.shape[1]
    outs = [None] * L
    h = h0
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        g, mm = gi[t].T, w @ h + b[:, None]
        r, z = m.sigmoid(g[:H] + mm[:H]), m.sigmoid(g[H:2 * H] + mm[H:2 * H])
        n = m.tanh(g[2 * H:] + r * mm[2 * H:])
        h = _hold(m, n + z * (h - n), h, batch_sizes, t)
        outs[t] = h
    return m.stack(outs), h


def _samples(d, r):
    H, N = 3, 2
    return [Sample((arr(r, (4, N, 3 * H), d), arr(r, (3 * H, H), d, -1.0, 1.0), arr(r, (3 * H,), d),
                    arr(r, (H, N), d)), {}),
            Sample((arr(r, (3, N, 3 * H), d), arr(r, (3 * H, H), d, -1.0, 1.0), arr(r, (3 * H,), d),
                    arr(r, (H, N), d)), {"reverse": True}, desc="reverse"),
            Sample((arr(r, (1, 1, 6), d), arr(r, (6, 2), d), arr(r, (6,), d), arr(r, (2, 1), d)), {},
                   desc="one step, batch 1")] + [
            Sample((arr(r, (4, 3, 3 * H), d), arr(r, (3 * H, H), d, -1.0, 1.0), arr(r, (3 * H,), d),
                    arr(r, (H, 3), d)), {"reverse": rev, "batch_sizes": (3, 2, 1, 1)},
                   desc="packed" + (", reverse" if rev else "")) for rev in (False, True)]


register("gru_layer", _f, _ref, _samples, dtypes=FLOATS)
