"""The numba source of the LSTM's backward loop (lstm_kernels.py loads it: its getter
`backward_layer`): the whole-loop kernel on the weights packed once, d W in the loop or
beside it. Text only, built on the forward's pieces (the part intrinsic, the packed
product)."""
from __future__ import annotations

from .lstm_kernels import _PART

__all__: list = []   # (text for lstm_kernels' getters)

_BACKWARD_STEP = """
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import tanh_{s} as tanh
""" + _PART + """

@njit(inline='always')
def step_back_part(zf, cp, dhf, dcf, y, full, dg, dco, k0, k1):
    # one backward step on flat (H, N) blocks, positions k0..k1-1 (one thread's units), on
    # views from index 0: from Z's step block zf, c_prev, the carried dh, dc and the output
    # cotangent y (with `full`, of h and c), the pre-activation gradient dg and the next dc
    s = cp.size
    one = np.{t}(1)
    g_ = dg.reshape(-1)
    zc, zi, zf_, zg, zo = (part(zf, s + k0, s + k1), part(zf, 2 * s + k0, 2 * s + k1), part(zf, 3 * s + k0, 3 * s + k1),
                           part(zf, 4 * s + k0, 4 * s + k1), part(zf, 5 * s + k0, 5 * s + k1))
    gi, gf, gg, go = (part(g_, k0, k1), part(g_, s + k0, s + k1), part(g_, 2 * s + k0, 2 * s + k1),
                      part(g_, 3 * s + k0, 3 * s + k1))
    dhp, dcp, yh, cpp, dc = part(dhf, k0, k1), part(dcf, k0, k1), part(y, k0, k1), part(cp, k0, k1), part(dco, k0, k1)
    for k in range(k1 - k0):                           # dct = dc + dh o (1 - tanh(c)^2)
        tc = tanh(zc[k])
        dh = dhp[k] + yh[k]
        o = zo[k]
        dc[k] = dcp[k] + dh * o * (one - tc * tc)
        go[k] = dh * tc * o * (one - o)                # do
    if full:                                           # the cotangent of c
        yc = part(y, s + k0, s + k1)
        for k in range(k1 - k0):
            dc[k] += yc[k]
    for k in range(k1 - k0):                           # di, df, dg; the next dc = dct f
        i, f, g, d = zi[k], zf_[k], zg[k], dc[k]
        gi[k] = d * g * i * (one - i)
        gf[k] = d * cpp[k] * f * (one - f)
        gg[k] = d * i * (one - g * g)
        dc[k] = d * f
"""

# The whole backward time loop: per step `step_back_part`, the bias gradient's share (while
# in cache) and dh = W^T dg (W^T packed once), so the loop over time is one call. Split
# over nth threads as the forward: thread q does its units' gate gradients, the threads
# meet, then it does its rows of dh, which read all of dg (double-buffered). A half is
# marked done once its gate gradients are written; its rows of G, db and (`with_dw`)
# dW += dg h_prev^T come after the mark, off the critical path, in step order per half
# (`wait_turn`). Each tile sums the same terms whoever does the half: one thread's bits.
_BACKWARD_LAYER = _BACKWARD_STEP + """
# {product}
# {meeting}


@njit("void(" + RO3 + ", " + RO3 + ", " + RO2 + ", " + RO2 + ", " + RO2 + ", {t}[:, ::1], {t}[:, :, ::1], "
      "{t}[:, :, ::1], {t}[:, :, ::1], {t}[::1], {t}[:, ::1], {t}[::1], boolean, boolean, int64, "
      "int64, int64[::1], int64[::1], {t}[:, ::1], {t}[:, ::1], int64[::1])", cache=CACHE, error_model='numpy',
      boundscheck=False, nogil=True, no_rewrites=True)   # (no_rewrites: as the forward loop's)
def loop(Z, d_y, c0, h0, w, dh, dcs, dgs, G, db, dw, wp, reverse, with_dw, q, nth, sync, fns, ht, yt, mv):
    \"\"\"the layer's backward loop (ops/lstm_prim.py): from Z (L, 6H, N), d_y (L, H, N)
    or (L, 2H, N) and w = W (4H, H), with dh[:H] = d h_n (dh: panel_rows(H) rows) and
    dcs[0] = d c_n on entry: every step's gate gradient G (L, N, 4H), db (4H,), and
    d h0 in dh[:H], d c0 in dcs[L % 2]; with `with_dw` (H a multiple of 16) also
    dw (4H, H) = sum_t dg_t h_prev(t)^T (h0 the first h_prev), step by step; dgs (2, 4H, N)
    and wp (panel_size(H, 4H)) scratch;
    share q of nth (nth > 1: H a multiple of SPLIT_Q; sync the meeting's state);
    ht (N, H), yt (Hy, N), mv (4,) the thread's scratch (`kernel`)\"\"\"
    L = Z.shape[0]
    four, hh = w.shape
    n = dgs.shape[2]
    s = hh * n
    full = d_y.shape[1] != hh
    Zf = Z.reshape(L, 6 * s)
    dhf = dh.reshape(-1)
    # ht: this thread's h_prev^T (with_dw); yt: its units of the step's output cotangent
    y = yt.reshape(-1)
    st = part(mv, 0, 3)                                # the thread's meeting state
    hv = part(mv, 3, 4)                                # `next_half`'s answer (by address)
    # unit r of a half: dh = W^T dg of step r - 1 for its rows (after every share's previous
    # unit), then step r's gate gradients, the mark, then its rows of G, db (and dW); r = 0
    # packs its panels of W^T first, r = L only multiplies
    for r in range(L + 1):
        k = L - 1 - r                                  # the step's place in time order
        t = L - 1 - k if reverse else k
        p = 0 if k <= 0 else (t + 1 if reverse else t - 1)
        # double-buffered dg: another share may still read step r - 1's
        dg = dgs[r % 2] if nth > 1 else dgs[0]
        while True:
            # `next_half` and `wait_turn` at their addresses fns[4], fns[5]
            call_at(fns[4], meet_next_half, (sync, r, q, nth, st, hv))
            half = hv[0]
            if half < 0:
                break
            u0, u1 = split_units(hh, half, nth)
            if r > 0:
                dgp = dgs[(r - 1) % 2] if nth > 1 else dgs[0]
                call_at(fns[0], panel_product, (wp, u0 // PMR, (u1 + PMR - 1) // PMR, four, 0, four, dgp, dh, False))
            else:
                for blk in range(4):                   # (a loop: numba's slice assignment
                    for j in range(blk * hh + u0, blk * hh + u1):   # compiled ~0.1 s more)
                        db[j] = 0
                # W^T's panels (`panel_pack_t`, compiler/cpu/gemm/template_panels.py, at its address fns[2])
                call_at(fns[2], panel_pack_t, (w, wp, u0 // PMR, (u1 + PMR - 1) // PMR, 0, four))
            if r < L:
                dc_in, dc_out = dcs[r % 2].reshape(-1), dcs[(r + 1) % 2].reshape(-1)
                yf = d_y[t].reshape(-1)
                for piece in range(2 if full else 1):   # h's cotangent, then c's
                    for e in range((piece * hh + u0) * n, (piece * hh + u1) * n):
                        y[e] = yf[e]
                if r >= 2:
                    # dg's buffer rows are read after step r - 2's mark, maybe by a late thread
                    call_at(fns[5], meet_wait_turn, (sync, half, r - 1))
                # c_prev chosen first: one call site of the step (inlined twice: +0.7 s compile)
                cpv = c0.reshape(-1) if k == 0 else part(Zf[p], s, 2 * s)
                step_back_part(Zf[t], cpv, dhf, dc_in, y, full, dg, dc_out, u0 * n, u1 * n)
            if nth > 1:
                half_done(sync, nth)                   # the other shares may multiply this one's dg now
            if r < L:
                call_at(fns[5], meet_wait_turn, (sync, half, r))   # db, dW: in step order (a late thread's share)
                gt = G[t]
                # the half's rows of each block (all 4H rows when nth == 1): one code path
                for blk in range(4 if nth > 1 else 1):
                    r0 = blk * hh + u0
                    r1 = blk * hh + u1 if nth > 1 else four
                    call_at(fns[3], panel_transpose, (dg, r0, r1, 0, n, gt, False))   # G's rows, in register blocks
                    dbv = part(db, r0, r1)             # db += the rows of dg^T; views from 0
                    for q_ in range(n):                # (see `gate_math_units`)
                        row = part(gt[q_], r0, r1)
                        for j in range(r1 - r0):
                            dbv[j] += row[j]
                if with_dw:
                    # the half's rows of dW += dg (4H, N) @ h_prev^T (N, H), dg read in place
                    # while in cache; each tile sums its N terms alike on either thread
                    call_at(fns[3], panel_transpose, (h0 if k == 0 else Zf[p, :s].reshape(hh, n), 0, hh, 0, n, ht, False))
                    for blk in range(4 if nth > 1 else 1):
                        r0 = blk * hh + u0
                        r1 = blk * hh + u1 if nth > 1 else four
                        # (`row_product`, compiler/cpu/gemm/template_panels.py, at its address fns[6])
                        call_at(fns[6], row_product, (dg, r0, r1, ht, dw, r > 0))
                turn_done(sync, half)
    # the caller's share returns when the loop is done, every share's work included
    for h in range(nth):
        call_at(fns[5], meet_wait_turn, (sync, h, L))


def kernel(Z, d_y, c0, h0, w, dh, dcs, dgs, G, db, dw, wp, reverse, with_dw, q, nth, sync):
    # the loop's scratch made here, one set per thread's call (as the forward's `kernel`)
    n = dgs.shape[2]
    loop(Z, d_y, c0, h0, w, dh, dcs, dgs, G, db, dw, wp, reverse, with_dw, q, nth, sync, _FNS,
         np.empty((n, w.shape[1]), Z.dtype), np.empty((d_y.shape[1], n), Z.dtype),
         np.array(MEET_STATE, np.int64))
"""
