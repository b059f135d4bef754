"""Op record for the eager LSTM layer (tracejit/ops/lstm_layer.py `lstm_layer_fm`: the
``lstm_layer`` / ``lstm_layer_backward`` primitives of tracejit/ops/lstm_prim.py made
differentiable). Checked like every op: forward against a numpy loop, float64 finite
differences (the fused backward) and second derivatives (``lstm_layer_backward``'s VJP:
autograd over the layer recomputed with tracejit ops), traced and compiled runs (captured,
the layer is ``lstm_layer`` + ``lstm_layer_states``; the input projection x W_ih^T is inside the
layer's loop, so the record takes x and W_ih). The PyTorch side is the same recurrence written with torch ops."""
from __future__ import annotations

import numpy as np

from inputs import packed_hold as _hold
from opdb import FLOATS, Sample, arr, register

from tracejit.ops.lstm_layer import lstm_layer_fm


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _ref(x, wx, w, b, h0, c0, reverse=False, batch_sizes=None):
    L, H = x.shape[0], w.shape[1]
    gi = x @ wx.T                   # the input projection (inside the op's loop)
    outs = [None] * L
    h, c = h0, c0
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        a = gi[t].T + w @ h + b[:, None]
        i, f, g, o = _sig(a[:H]), _sig(a[H:2 * H]), np.tanh(a[2 * H:3 * H]), _sig(a[3 * H:])
        c_new = f * c + i * g
        h, c = _hold(np, o * np.tanh(c_new), h, batch_sizes, t), _hold(np, c_new, c, batch_sizes, t)
        outs[t] = h
    return np.stack(outs), h, c


def _f(m, x, wx, w, b, h0, c0, reverse=False, batch_sizes=None):
    if m.__name__ != "torch":
        return lstm_layer_fm(x, wx, w, h0, c0, reverse, b, batch_sizes)
    L, H = x.shape[0], w.shape[1]
    gi = x @ wx.T
    outs = [None] * L
    h, c = h0, c0
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        i, f, g, o = (gi[t].T + w @ h + b[:, None]).chunk(4, 0)
        c_new = m.sigmoid(f) * c + m.sigmoid(i) * m.tanh(g)
        h, c = _hold(m, m.sigmoid(o) * m.tanh(c_new), h, batch_sizes, t), _hold(m, c_new, c, batch_sizes, t)
        outs[t] = h
    return m.stack(outs), h, c


def _samples(d, r):
    H, N = 3, 2
    I = 4
    return [Sample((arr(r, (4, N, I), d), arr(r, (4 * H, I), d, -1.0, 1.0), arr(r, (4 * H, H), d, -1.0, 1.0),
                    arr(r, (4 * H,), d), arr(r, (H, N), d), arr(r, (H, N), d)), {}),
            Sample((arr(r, (3, N, I), d), arr(r, (4 * H, I), d, -1.0, 1.0), arr(r, (4 * H, H), d, -1.0, 1.0),
                    arr(r, (4 * H,), d), arr(r, (H, N), d), arr(r, (H, N), d)), {"reverse": True},
                   desc="reverse"),
            Sample((arr(r, (1, 1, 3), d), arr(r, (8, 3), d), arr(r, (8, 2), d), arr(r, (8,), d),
                    arr(r, (2, 1), d), arr(r, (2, 1), d)), {}, desc="one step, batch 1")] + [
            Sample((arr(r, (4, 3, I), d), arr(r, (4 * H, I), d, -1.0, 1.0), arr(r, (4 * H, H), d, -1.0, 1.0),
                    arr(r, (4 * H,), d), arr(r, (H, 3), d), arr(r, (H, 3), d)),
                   {"reverse": rev, "batch_sizes": (3, 2, 1, 1)}, desc="packed" + (", reverse" if rev else ""))
            for rev in (False, True)]


register("lstm_layer", _f, _ref, _samples, dtypes=FLOATS)
