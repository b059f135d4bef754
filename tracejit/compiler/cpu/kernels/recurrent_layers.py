"""The recurrent layers' time loops as numba kernels: the CPU backend's implementations of
ops/lstm_prim.py's, gru_prim.py's and rnn_prim.py's layer primitives.

Each forward and backward is the whole time loop in one kernel call where it is loaded
(lstm_kernels.py, rnn_kernels.py); the LSTM's loops split by hidden units over the threads
the machine gives (loop_split.py). While the kernel is not loaded, the numpy form runs.
"""
from __future__ import annotations

import numpy as np

from ....memory import line_empty
from ....ops.lstm_prim import _order, backward_parts, finish_backward
from ..gemm.template_panels import panel_rows, panel_size
from . import loop_split as _split
from . import lstm_kernels as _kernels
from . import rnn_kernels as _rnn_kernels
from .loader import floats
from .... import envflags

__all__ = ["lstm_layer", "lstm_layer_backward", "gru_layer", "gru_layer_backward", "rnn_layer",
           "rnn_layer_backward", "LSTM_CHECK", "LSTM_BACKWARD_CHECK", "GRU_CHECK",
           "GRU_BACKWARD_CHECK", "RNN_CHECK", "RNN_BACKWARD_CHECK"]

# The checkers: the kernels take numpy float arrays of one dtype. A packed layer
# (``batch_sizes``) runs the numpy form, whose steps hold the finished sequences' states.
def _unpacked(check):
    def checker(*arrays, batch_sizes=None, **params) -> bool:
        return batch_sizes is None and check(*arrays, **params)
    checker.__name__ = check.__name__
    return checker


LSTM_CHECK = _unpacked(floats(6))           # x, wx, w, b, h0, c0


@_unpacked
def LSTM_BACKWARD_CHECK(d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, **params) -> bool:
    return floats(7)(d_y, d_hn, d_cn, Z, w, h0, c0)


GRU_CHECK = _unpacked(floats(4))            # gi, w, b, h0


@_unpacked
def GRU_BACKWARD_CHECK(d_y, d_hn, gi, w, b, h0, Z, **params) -> bool:
    return floats(5)(d_y, d_hn, Z, w, h0)


# numpy's ``dtype.name`` is a Python property (~1.5 us); a layer called once per time step
# (an LSTMCell's loop: 200 calls a step) asked it three times per call
_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def _name(dt) -> str:
    return _NAMES.get(dt) or dt.name


RNN_CHECK = _unpacked(floats(4))            # gi, w, b, h0


@_unpacked
def RNN_BACKWARD_CHECK(d_y, gi, w, b, h0, hs, **params) -> bool:
    return floats(4)(d_y, hs, w, h0)


# ---------------------------------------------------------------- LSTM
def lstm_layer(x, wx, w, b, h0, c0, reverse=False):
    L, N, I = x.shape
    H = w.shape[1]
    name = _name(x.dtype)
    layer = _kernels.forward_layer(name)
    if layer is None:
        return None
    # the whole loop in one kernel, the input projection and the GEMMs (on [W_ih | W]
    # packed once) included
    Z = np.empty((L, 6 * H, N), dtype=x.dtype)
    ro, dt = _kernels.readonly, x.dtype
    m = np.empty((panel_rows(4 * H, name), N), dtype=dt)
    _split.run(layer, (ro(np.ascontiguousarray(x)), ro(wx), ro(w), ro(b), ro(h0), ro(c0), Z, m,
                       np.empty(panel_size(4 * H, I + H, name), dtype=dt), bool(reverse)),
               _split.threads(H, work=L * N * 4 * H * (I + H)))
    return Z


# Whether d W is computed inside the whole-loop backward (each step's
# dW += dg h_prev^T on the template's register tile while dg is in cache, split with the
# loop's halves) rather than one GEMM after the loop, whose second BLAS thread a busy
# machine often delays (LSTM LM layer backward, split: 10.9 against 17.0 ms median).
# Needs H a multiple of 16 (whole tiles).
_weight_grad_in_loop = envflags.flag("TRACEJIT_LSTM_WEIGHT_GRAD_IN_LOOP")   # (the switch: tests, A/B measurements)


def lstm_layer_backward(d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse=False):
    L, six, N = Z.shape
    H = six // 6
    off = backward_parts(4, H, N, 2)
    name = _name(Z.dtype)
    layer = _kernels.backward_layer(name)
    if layer is None:
        return None
    # on a cache line: the split loop's threads write neighbouring blocks of G's rows and db
    res = line_empty((off[4] + 4 * H * L * N,), Z.dtype)
    G = res[off[4]:].reshape(L, N, 4 * H)
    order = list(_order(L, reverse))
    # the whole loop in one kernel, GEMMs (on W^T packed once) and the bias gradient included
    ro, dt = _kernels.readonly, Z.dtype
    dh = np.empty((panel_rows(H, name), N), dtype=dt)
    dh[:H] = d_hn
    dcs = np.empty((2, H, N), dtype=dt)
    dcs[0] = d_cn
    db = res[off[1]:off[2]]
    dw = res[off[0]:off[1]].reshape(4 * H, H)
    nth = _split.threads(H, work=L * N * 4 * H * (x.shape[2] + H))
    # d W inside the loop (each step's outer product while its gate gradient is in cache:
    # no GEMM after the loop)
    in_loop = _weight_grad_in_loop() and H % 16 == 0 and L > 0
    args = (ro(Z), ro(d_y), ro(c0), ro(h0), ro(w), dh, dcs, np.empty((2, 4 * H, N), dtype=dt), G, db,
            dw if in_loop else np.empty((1, 1), dt), np.empty(panel_size(H, 4 * H, name), dtype=dt),
            bool(reverse), in_loop)
    _split.run(layer, args, nth)
    return finish_backward(np, res, off, G, Z, h0, (dh[:H], dcs[L % 2]), order, db_done=True, dw_done=in_loop)


# ---------------------------------------------------------------- GRU, RNN
def _state_forward(get, gi, w, b, h0, rows: int, reverse, relu=False):
    """A GRU's or RNN's forward: the whole loop in `get`'s kernel for gi's dtype, GEMMs (on
    W (G*H, H) packed once) included -> its result (L, rows * H, N), or None (no kernel)."""
    L, N, _ = gi.shape
    G, H = w.shape
    name = _name(gi.dtype)
    layer = get(name)
    if layer is None:
        return None
    out = np.empty((L, rows * H, N), dtype=gi.dtype)
    ro, dt = _kernels.readonly, gi.dtype
    layer(ro(gi), ro(w), ro(b), ro(h0), out, np.empty((panel_rows(G, name), N), dtype=dt),
          np.empty(panel_size(G, H, name), dtype=dt), bool(reverse), relu)
    return out


def gru_layer(gi, w, b, h0, reverse=False):
    return _state_forward(_kernels.gru_forward_layer, gi, w, b, h0, 5, reverse)


def gru_layer_backward(d_y, d_hn, gi, w, b, h0, Z, reverse=False):
    L, five, N = Z.shape
    H = five // 5
    name = _name(Z.dtype)
    layer = _kernels.gru_backward_layer(name)
    if layer is None:
        return None
    off = backward_parts(3, H, N)
    res = np.empty(off[3] + 3 * H * L * N, dtype=Z.dtype)
    G = res[off[3]:].reshape(L, N, 3 * H)         # d gi, in the projection's layout
    M = np.empty((L, N, 3 * H), dtype=Z.dtype)     # d (W h + b) per step
    # the whole loop in one kernel, GEMMs (on W^T packed once) included
    ro, dt = _kernels.readonly, Z.dtype
    dhs = np.empty((2, panel_rows(H, name), N), dtype=dt)
    dhs[0, :H] = d_hn
    layer(ro(Z), ro(d_y), ro(h0), ro(w), dhs, np.empty((3 * H, N), dtype=dt), np.empty((3 * H, N), dtype=dt),
          G, M, np.empty(panel_size(H, 3 * H, name), dtype=dt), bool(reverse))
    return finish_backward(np, res, off, M, Z, h0, (dhs[L % 2, :H],), list(_order(L, reverse)))


def rnn_layer(gi, w, b, h0, reverse=False, nonlinearity="tanh"):
    return _state_forward(_rnn_kernels.forward_layer, gi, w, b, h0, 1, reverse, nonlinearity == "relu")


def rnn_layer_backward(d_y, gi, w, b, h0, hs, reverse=False, nonlinearity="tanh"):
    L, H, N = hs.shape
    name = _name(hs.dtype)
    layer = _rnn_kernels.backward_layer(name)
    if layer is None:
        return None
    off = backward_parts(1, H, N)
    res = np.empty(off[3] + H * L * N, dtype=hs.dtype)
    G = res[off[3]:].reshape(L, N, H)
    order = list(_order(L, reverse))
    dp = np.empty((H, N), dtype=hs.dtype)
    # the whole loop in one kernel, GEMMs and the bias gradient included
    ro, dt = _kernels.readonly, hs.dtype
    dh = np.zeros((panel_rows(H, name), N), dtype=dt)
    layer(ro(hs), ro(d_y), ro(w), dh, dp, G, res[off[1]:off[2]], np.empty(panel_size(H, H, name), dtype=dt),
          bool(reverse), nonlinearity == "relu")
    return finish_backward(np, res, off, G, hs, h0, (dh[:H],), order, db_done=True)
