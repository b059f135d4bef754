"""An Elman RNN layer's time loops (tanh or relu) as one numba kernel each way (loader.py).

Per step an RNN layer is one small GEMM and one elementwise pass, so driven from Python
the call setup is a large share of it. As lstm_kernels.py's, each kernel runs the whole
loop, its GEMMs on W packed once per call; the product, packing and transposes are called
by address (inlined, the forward compiles ~4x slower). The forward is the GRU's loop
(gru_kernels.py `STATE_FORWARD`) with the RNN's cell. tanh is mathlib's.
"""
from __future__ import annotations

from .lstm_kernels import _get
from .gru_kernels import STATE_FORWARD   # (after lstm_kernels, whose import loads gru_kernels)

__all__ = ["forward_layer", "backward_layer"]

_HEAD = """
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import tanh_{s} as tanh
"""

_FORWARD = _HEAD + """

@njit(inline='always')
def cell(fns, gi, b, m, hp, out, relu):
    # one step after m (H, N) = W h_prev (`STATE_FORWARD`'s cell): + gi (N, H)^T in register
    # blocks (`panel_transpose` at fns[3]), + b and the nonlinearity, into the step's h `out`
    hh, n = m.shape
    zero = np.{t}(0)
    call_at(fns[3], panel_transpose, (gi, 0, n, 0, hh, m, True))
    for j in range(hh):
        bj = b[j]
        row, o = m[j], out[j]
        if relu:
            for q in range(n):
                v = row[q] + bj
                o[q] = zero if v < zero else v      # NaN stays NaN, as np.maximum
        else:
            for q in range(n):
                o[q] = tanh(row[q] + bj)
""" + STATE_FORWARD

_BACKWARD = _HEAD + """
# {product}

@njit("void(" + RO3 + ", " + RO3 + ", " + RO2 + ", {t}[:, ::1], {t}[:, ::1], {t}[:, :, ::1], "
      "{t}[::1], {t}[::1], boolean, boolean, int64[::1])", cache=CACHE, error_model='numpy', boundscheck=False,
      nogil=True)
def loop(hs, d_y, w, dh, dp, G, db, wp, reverse, relu, fns):
    \"\"\"the layer's backward loop (ops/rnn_prim.py): from hs and d_y (L, H, N) and w = W (H, H),
    with dh = 0 on entry (dh: panel_rows(H) rows): every step's pre-activation gradient
    G (L, N, H), db (H,) and d h0 in dh[:H]; dp (H, N) and wp (panel_size(H, H)) scratch\"\"\"
    L = hs.shape[0]
    hh = w.shape[0]
    n = dh.shape[1]
    one, zero = np.{t}(1), np.{t}(0)
    dhf, dpf = dh.reshape(-1), dp.reshape(-1)
    db[:] = 0
    call_at(fns[2], panel_pack_t, (w, wp, 0, (hh + PMR - 1) // PMR, 0, hh))   # W^T's panels
    for r in range(L):
        k = L - 1 - r
        t = L - 1 - k if reverse else k
        h, y = hs[t].reshape(-1), d_y[t].reshape(-1)
        # through the nonlinearity, from its output: tanh' = 1 - h^2; relu' = (h > 0)
        if relu:
            for i in range(dpf.size):
                dpf[i] = (dhf[i] + y[i]) * (one if h[i] > zero else zero)
        else:
            for i in range(dpf.size):
                dpf[i] = (dhf[i] + y[i]) * (one - h[i] * h[i])
        gt = G[t]
        call_at(fns[3], panel_transpose, (dp, 0, hh, 0, n, gt, False))   # (`transpose_blocks(dp, gt, False)`)
        for q in range(n):                          # db += the rows of dp^T (vector adds)
            row = gt[q]
            for j in range(hh):
                db[j] += row[j]
        call_at(fns[0], panel_product, (wp, 0, (hh + PMR - 1) // PMR, hh, 0, hh, dp, dh, False))   # dh = W^T dp
"""


def forward_layer(dtype: str):
    """The RNN's whole forward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_FORWARD, "rnn_forward_layer_packed", dtype, steady=True)


def backward_layer(dtype: str):
    """The RNN's whole backward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_BACKWARD, "rnn_backward_layer_packed", dtype, steady=True)
