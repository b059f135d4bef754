"""An Elman RNN layer's time loops (tanh or relu) as one numba kernel each way (ops/native.py).

Per step an RNN layer is one small GEMM (``W_hh h``: H x H by H x N) and one elementwise
pass, so driven from Python (ops/rnn_prim.py's numpy form) the per-step call setup is a
large share of it. As ops/lstm_kernels.py's whole-loop kernels for the LSTM and GRU, each
kernel here runs the whole loop over time, calling numpy's BLAS GEMM through its address
(ops/blas_gemm.py); without that GEMM the layer runs its numpy form. tanh is
compiler/mathlib.py's (pure arithmetic, so the pass vectorizes).
"""
from __future__ import annotations

from .blas_gemm import GEMM_SOURCE
from .lstm_kernels import ADD_TRANSPOSED, _TRANSPOSE, _get_layer

__all__ = ["forward_layer", "backward_layer"]

_HEAD = """
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import tanh_{s} as tanh
""" + _TRANSPOSE + ADD_TRANSPOSED + GEMM_SOURCE

_FORWARD = _HEAD + """

@njit("void(int64, " + RO3 + ", " + RO2 + ", " + RO1 + ", " + RO2 + ", {t}[:, :, ::1], boolean, boolean)",
      cache=CACHE, error_model='numpy', boundscheck=False, nogil=True)
def kernel(fn, gi, w, b, h0, hs, reverse, relu):
    \"\"\"the layer's forward (ops/rnn_prim.py): hs (L, H, N), every step's h, from gi (L, N, H),
    w (H, H), b (H,), h0 (H, N); fn the address of cblas_?gemm\"\"\"
    L = gi.shape[0]
    hh = w.shape[0]
    n = h0.shape[1]
    zero = np.{t}(0)
    for k in range(L):
        t = L - 1 - k if reverse else k
        p = hs[t]
        if k == 0:
            gemm(fn, False, hh, n, hh, w, hh, h0, n, p, n, 0.0)
        else:
            gemm(fn, False, hh, n, hh, w, hh, hs[t + 1 if reverse else t - 1], n, p, n, 0.0)
        add_transposed(gi[t], p)            # + gi[t]^T (the LSTM's tiled read)
        for j in range(hh):
            bj = b[j]
            row = p[j]
            for q in range(n):
                row[q] += bj
        pf = p.reshape(-1)
        if relu:
            for i in range(pf.size):
                v = pf[i]
                pf[i] = zero if v < zero else v       # NaN stays NaN, as np.maximum
        else:
            for i in range(pf.size):
                pf[i] = tanh(pf[i])
"""

_BACKWARD = _HEAD + """

@njit("void(int64, " + RO3 + ", " + RO3 + ", " + RO2 + ", {t}[:, ::1], {t}[:, ::1], {t}[:, :, ::1], "
      "{t}[::1], boolean, boolean)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True)
def kernel(fn, hs, d_y, wt, dh, dp, G, db, reverse, relu):
    \"\"\"the layer's backward loop (ops/rnn_prim.py): from hs and d_y (L, H, N) and wt = W^T,
    with dh = 0 on entry: every step's pre-activation gradient G (L, N, H), db (H,) and
    d h0 in dh; dp (H, N) scratch\"\"\"
    L = hs.shape[0]
    hh = wt.shape[0]
    n = dh.shape[1]
    one, zero = np.{t}(1), np.{t}(0)
    dhf, dpf = dh.reshape(-1), dp.reshape(-1)
    db[:] = 0
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
        transpose_into(dp, G[t])
        for j in range(hh):
            row = dp[j]
            acc = zero
            for q in range(n):
                acc += row[q]
            db[j] += acc
        gemm(fn, False, hh, n, hh, wt, hh, dp, n, dh, n, 0.0)    # dh = W^T dp
"""


def forward_layer(dtype: str):
    """(kernel, GEMM address) of the RNN's whole forward loop for `dtype`, or None."""
    return _get_layer(_FORWARD, "rnn_forward_layer", dtype)


def backward_layer(dtype: str):
    """(kernel, GEMM address) of the RNN's whole backward loop for `dtype`, or None."""
    return _get_layer(_BACKWARD, "rnn_backward_layer", dtype)
