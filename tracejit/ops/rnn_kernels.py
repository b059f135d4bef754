"""An Elman RNN layer's time loops (tanh or relu) as one numba kernel each way (ops/native.py).

Per step an RNN layer is one small GEMM (``W_hh h``: H x H by H x N) and one elementwise
pass, so driven from Python (ops/rnn_prim.py's numpy form) the per-step call setup is a
large share of it. As ops/lstm_kernels.py's whole-loop kernels for the LSTM and GRU, each
kernel here runs the whole loop over time, its GEMMs on W packed once per call
(ops/packed_gemm.py); without numba the layer runs its numpy form. tanh is
compiler/mathlib.py's (pure arithmetic, so the pass vectorizes).
"""
from __future__ import annotations

from .lstm_kernels import PACKED, _get

__all__ = ["forward_layer", "backward_layer"]

_HEAD = """
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import tanh_{s} as tanh
""" + PACKED

_FORWARD = _HEAD + """

@njit("void(" + RO3 + ", " + RO2 + ", " + RO1 + ", " + RO2 + ", {t}[:, :, ::1], {t}[:, ::1], {t}[::1], "
      "boolean, boolean)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True)
def kernel(gi, w, b, h0, hs, m, wp, reverse, relu):
    \"\"\"the layer's forward (ops/rnn_prim.py): hs (L, H, N), every step's h, from gi (L, N, H),
    w (H, H), b (H,), h0 (H, N); m (padded_rows(H), N) and wp (packed_size(H, H)) scratch\"\"\"
    L = gi.shape[0]
    hh = w.shape[0]
    n = h0.shape[1]
    zero = np.{t}(0)
    pack_panels(w, wp, False)
    mg = m[:hh]
    for k in range(L):
        t = L - 1 - k if reverse else k
        if k == 0:
            packed_gemm(wp, hh, hh, h0, m, False)
        else:
            packed_gemm(wp, hh, hh, hs[t + 1 if reverse else t - 1], m, False)
        transpose_blocks(gi[t], mg, True)           # + gi[t]^T, in register blocks
        p = hs[t]
        for j in range(hh):                         # + b and the nonlinearity, into h
            bj = b[j]
            row, out = mg[j], p[j]
            if relu:
                for q in range(n):
                    v = row[q] + bj
                    out[q] = zero if v < zero else v       # NaN stays NaN, as np.maximum
            else:
                for q in range(n):
                    out[q] = tanh(row[q] + bj)
"""

_BACKWARD = _HEAD + """

@njit("void(" + RO3 + ", " + RO3 + ", " + RO2 + ", {t}[:, ::1], {t}[:, ::1], {t}[:, :, ::1], "
      "{t}[::1], {t}[::1], boolean, boolean)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True)
def kernel(hs, d_y, w, dh, dp, G, db, wp, reverse, relu):
    \"\"\"the layer's backward loop (ops/rnn_prim.py): from hs and d_y (L, H, N) and w = W (H, H),
    with dh = 0 on entry (dh: padded_rows(H) rows): every step's pre-activation gradient
    G (L, N, H), db (H,) and d h0 in dh[:H]; dp (H, N) and wp (packed_size(H, H)) scratch\"\"\"
    L = hs.shape[0]
    hh = w.shape[0]
    n = dh.shape[1]
    one, zero = np.{t}(1), np.{t}(0)
    dhf, dpf = dh.reshape(-1), dp.reshape(-1)
    db[:] = 0
    pack_panels(w, wp, True)                        # W^T's panels
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
        transpose_blocks(dp, gt, False)
        for q in range(n):                          # db += the rows of dp^T (vector adds)
            row = gt[q]
            for j in range(hh):
                db[j] += row[j]
        packed_gemm(wp, hh, hh, dp, dh, False)      # dh = W^T dp
"""


def forward_layer(dtype: str):
    """The RNN's whole forward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_FORWARD, "rnn_forward_layer_packed", dtype, steady=True)


def backward_layer(dtype: str):
    """The RNN's whole backward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_BACKWARD, "rnn_backward_layer_packed", dtype, steady=True)
