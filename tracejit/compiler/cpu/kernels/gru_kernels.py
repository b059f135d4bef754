"""The numba source of the GRU layer's loops (lstm_kernels.py loads them: its getters
`gru_forward_layer`, `gru_backward_layer`): the whole-loop kernels on packed weights, built
on the LSTM's pieces (the sigmoid, the packed product). The forward loop (`STATE_FORWARD`)
takes the step's cell as a parameter: the RNN's forward is it with its own (rnn_kernels.py)."""
from __future__ import annotations

from .lstm_kernels import _SIGMOID_HEAD

__all__ = ["STATE_FORWARD"]   # (text for lstm_kernels' getters)

_GRU_FORWARD_GATES = _SIGMOID_HEAD + """


@njit(inline='always')
def cell(fns, gi, b, m, hp2, z, relu):
    # one GRU forward step's gate math (`STATE_FORWARD`'s cell): m (3H, N) = W h
    # (overwritten); gi (N, 3H) the step's input projection; z (5H, N) = (h, r, z, n, hn);
    # hp2 the previous h
    three, n = m.shape
    hh = three // 3
    hp = hp2.reshape(-1)
    s = hp.size
    for j in range(2 * hh):        # r, z pre-activations: the transposed read of gi
        bj = b[j]
        row = m[j]
        for k in range(n):
            row[k] += gi[k, j] + bj
    for j in range(hh):            # hn = m_n + b_n; gi_n parked in n's rows
        bj = b[2 * hh + j]
        row, zn, zg = m[2 * hh + j], z[4 * hh + j], z[3 * hh + j]
        for k in range(n):
            zn[k] = row[k] + bj
            zg[k] = gi[k, 2 * hh + j]
    p = m.reshape(-1)
    zf = z.reshape(-1)
    for k in range(2 * s):
        zf[s + k] = sigmoid(p[k])                      # r, z
    for k in range(s):
        zf[3 * s + k] = tanh(zf[3 * s + k] + zf[s + k] * zf[4 * s + k])
    for k in range(s):
        zf[k] = zf[3 * s + k] + zf[2 * s + k] * (hp[k] - zf[3 * s + k])
"""

# A GRU's or RNN's whole forward loop, as `_FORWARD_LAYER`'s (W packed once, the product by
# the shared `panel_product` by address; no_rewrites as the LSTM loops'): appended to a
# source that defines the step's `cell`.
STATE_FORWARD = """
# {product}


@njit("void(" + RO3 + ", " + RO2 + ", " + RO1 + ", " + RO2 + ", {t}[:, :, ::1], {t}[:, ::1], {t}[::1], boolean, "
      "boolean, int64[::1])", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def loop(gi, w, b, h0, Z, m, wp, reverse, relu, fns):
    \"\"\"a GRU's or RNN's forward (ops/gru_prim.py, rnn_prim.py): Z (L, R*H, N), each step's R
    rows of the cell (the GRU's h, r, z, n, hn; the RNN's h), from gi (L, N, G*H), w (G*H, H),
    b (G*H,), h0 (H, N); m (panel_rows(G*H), N) and wp (panel_size(G*H, H)) scratch; relu: the
    RNN's nonlinearity\"\"\"
    L = gi.shape[0]
    g, hh = w.shape
    call_at(fns[1], panel_pack, (w, wp, 0, (g + PMR - 1) // PMR, 0, hh))   # (`pack_panels(w, wp, False)`)
    mg = m[:g]
    for k in range(L):
        t = L - 1 - k if reverse else k
        p = t + 1 if reverse else t - 1
        # h_prev chosen first: one call site of the step; m = W h_prev by `panel_product`
        # at its address fns[0]
        hp = h0 if k == 0 else Z[p, :hh]
        call_at(fns[0], panel_product, (wp, 0, (g + PMR - 1) // PMR, hh, 0, hh, hp, m, False))
        cell(fns, gi[t], b, mg, hp, Z[t], relu)
"""
_GRU_FORWARD_LAYER = _GRU_FORWARD_GATES + STATE_FORWARD

_GRU_BACKWARD_STEP = """
import numpy as np
from numba import njit

@njit(inline='always')
def gru_step_back(zf, hp, dhf, y, g_, m_, d):
    # one GRU backward step on flat blocks: g_ (3H, N), m_ (3H, N) and d = dh z (the direct
    # part of dh_prev), from Z's step block zf, the previous h, the carried dh and y
    s = hp.size
    one = np.{t}(1)
    for k in range(s):
        d[k] = dhf[k] + y[k]                           # dh
    for k in range(s):                                 # dz_pre = dh (h_prev - n) z (1 - z)
        zz = zf[2 * s + k]
        g_[s + k] = d[k] * (hp[k] - zf[3 * s + k]) * zz * (one - zz)
    for k in range(s):                                 # dn_pre = dh (1 - z) (1 - n^2)
        nn = zf[3 * s + k]
        g_[2 * s + k] = d[k] * (one - zf[2 * s + k]) * (one - nn * nn)
    for k in range(s):                                 # dr_pre = dn_pre hn r (1 - r)
        r = zf[s + k]
        g_[k] = g_[2 * s + k] * zf[4 * s + k] * r * (one - r)
    for k in range(2 * s):
        m_[k] = g_[k]
    for k in range(s):                                 # d hn = dn_pre r
        m_[2 * s + k] = g_[2 * s + k] * zf[s + k]
    for k in range(s):
        d[k] *= zf[2 * s + k]
"""

# The GRU's whole backward loop: per step `gru_step_back`, the transposed writes of dg and
# dm, and dh = W^T dm + dh z (beta 1, W^T packed once).
_GRU_BACKWARD_LAYER = _GRU_BACKWARD_STEP + """
# {product}


@njit("void(" + RO3 + ", " + RO3 + ", " + RO2 + ", " + RO2 + ", {t}[:, :, ::1], {t}[:, ::1], "
      "{t}[:, ::1], {t}[:, :, ::1], {t}[:, :, ::1], {t}[::1], boolean, int64[::1])", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def loop(Z, d_y, h0, w, dhs, dg, dm, G, M, wp, reverse, fns):
    \"\"\"the GRU layer's backward loop (ops/gru_prim.py): from Z (L, 5H, N), d_y (L, H, N) and
    w = W (3H, H), with dhs[0, :H] = d h_n on entry (dhs (2, panel_rows(H), N)): G and
    M (L, N, 3H) and d h0 in dhs[L % 2, :H]; dg, dm (3H, N) and wp (panel_size(H, 3H)) scratch\"\"\"
    L = Z.shape[0]
    three, hh = w.shape
    n = dg.shape[1]
    s = hh * n
    Zf = Z.reshape(L, 5 * s)
    call_at(fns[2], panel_pack_t, (w, wp, 0, (hh + PMR - 1) // PMR, 0, three))   # W^T's panels
    for r in range(L):
        k = L - 1 - r
        t = L - 1 - k if reverse else k
        dh_in, d = dhs[r % 2], dhs[(r + 1) % 2]
        y = d_y[t].reshape(-1)
        p = t + 1 if reverse else t - 1
        hp = h0.reshape(-1) if k == 0 else Zf[p, :s]   # one call site of the step (see the forward)
        gru_step_back(Zf[t], hp, dh_in.reshape(-1), y, dg.reshape(-1), dm.reshape(-1), d.reshape(-1))
        # dg into G and dm into M, transposed, by `panel_transpose` at fns[3]
        for which in range(2):
            call_at(fns[3], panel_transpose, (dg if which == 0 else dm, 0, three, 0, n, G[t] if which == 0 else M[t], False))
        # d = W^T dm + d by `panel_product` (compiler/cpu/gemm/template_panels.py) at its address fns[0]
        call_at(fns[0], panel_product, (wp, 0, (hh + PMR - 1) // PMR, three, 0, three, dm, d, True))
"""
