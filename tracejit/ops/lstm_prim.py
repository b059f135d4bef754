"""An eager LSTM layer's time loops as two primitives: ``lstm_layer`` and ``lstm_layer_backward``.

Why primitives: run step by step, an eager LSTM records a graph node or three per time
step and layer, and its gate math is ~13 elementwise op calls forward and ~25 backward per
step (three sigmoids, two tanh, the cell update), each with dispatch and graph bookkeeping,
plus the slicing, stacking and accumulation around the steps. For the 2-layer, 64-step LM
step (batch 32, hidden 256) that was ~6000 op calls and more time than the gate math
itself. Here each time loop runs inside one op (one GEMM plus ~12 in-place numpy passes
per step forward, ~25 backward), as PyTorch's CPU LSTM is one oneDNN layer call forward
and one backward.

`tracejit.nn.lstm_layer` makes the pair differentiable (an autograd Function whose
create_graph path is written with tracejit ops), so neither primitive has a VJP of its
own. Captured LSTM layers do not use them: nn/recurrent.py runs those as a `scan`, which
the compiler fuses into one kernel per step.
"""
from __future__ import annotations

import contextlib

from ..errors import DTypeError, ShapeError
from .registry import Aval, bind, defprim

__all__ = ["lstm_layer", "lstm_layer_backward"]


def _errstate(xp):
    # exp(-x) overflows to inf for x < -88 (float32): 1 / (1 + inf) = 0 is the right limit
    return xp.errstate(over="ignore", under="ignore") if hasattr(xp, "errstate") else contextlib.nullcontext()


def _sigmoid_(xp, a):
    """sigmoid in place, as 1 / (1 + exp(-a)) (four vectorized passes, no branch)."""
    xp.negative(a, out=a)
    xp.exp(a, out=a)
    a += 1
    xp.reciprocal(a, out=a)
    return a


# Layouts: gi (L, N, 4H), the input projection of the sequence as one GEMM lays it out;
# w (4H, H); b (4H,), the sum of both biases (added per step: one small pass instead of
# one over all of gi); h0, c0 (H, N). The forward's result Z is (L, 6H, N): per step h_t
# (rows 0:H), c_t (H:2H) and the activated gates i, f, g, o (2H:6H), which the backward
# reads instead of recomputing the step's GEMM.
#
# Feature-major states because OpenBLAS runs the small per-step products faster that way
# round (batch 32, hidden 256, one thread: ``W @ h`` 0.20 ms against 0.29 ms for
# ``h^T @ W^T`` on a contiguous transpose and 0.41 ms on the transposed view; backward
# ``W^T @ g`` 0.20 against ``g^T @ W`` 0.26 ms), and every gate is then a contiguous row
# block. Each step reads its (N, 4H) block of gi transposed (one 128 KB block: cache-
# friendly; a feature-major (4H, L*N) projection made each step read 1024 rows of 128 bytes
# 8 KB apart: 10 of the forward's 37 ms). The backward writes its gate gradients back the
# same way, so they form the (L*N, 4H) gradient the projection's GEMMs take as it is.

def _matmul(xp, a, b):
    if xp.__name__ == "numpy":
        from .linalg import _blas_matmul   # the BLAS thread policy of every eager product
        return _blas_matmul(a, b)
    return xp.matmul(a, b)


def _order(L: int, reverse: bool):
    return range(L - 1, -1, -1) if reverse else range(L)


def _lstm_layer_impl(xp, gi, w, b, h0, c0, reverse=False):
    L, N, four = gi.shape
    H = four // 4
    Z = xp.empty((L, 6 * H, N), dtype=gi.dtype)
    h, c = h0, c0
    b = b.reshape(4 * H, 1)
    with _errstate(xp):
        for t in _order(L, reverse):
            z = Z[t]
            gates = z[2 * H:]
            xp.add(gi[t].T, _matmul(xp, w, h), out=gates)
            gates += b
            _sigmoid_(xp, gates[:2 * H])                        # i, f
            _sigmoid_(xp, gates[3 * H:])                        # o
            g = gates[2 * H:3 * H]
            xp.tanh(g, out=g)
            i, f, o = gates[:H], gates[H:2 * H], gates[3 * H:]
            c_new, h_new = z[H:2 * H], z[:H]
            xp.multiply(f, c, out=c_new)
            ig = i * g
            c_new += ig
            xp.tanh(c_new, out=h_new)
            h_new *= o
            h, c = h_new, c_new
    return Z


def _lstm_layer_rule(gi: Aval, w: Aval, b: Aval, h0: Aval, c0: Aval, reverse=False):
    if len(gi.shape) != 3 or len(w.shape) != 2:
        raise ShapeError(f"lstm_layer: expected gi (L, N, 4H) and w (4H, H), got {gi.shape} and {w.shape}")
    L, N, four = gi.shape
    H = w.shape[1]
    if (four != 4 * H or w.shape[0] != 4 * H or b.shape != (4 * H,) or h0.shape != (H, N)
            or c0.shape != (H, N)):
        raise ShapeError(f"lstm_layer: gi {gi.shape}, w {w.shape}, b {b.shape}, h0 {h0.shape} and c0 "
                         f"{c0.shape} do not fit gi (L, N, 4H), w (4H, H), b (4H,), h0 and c0 (H, N)")
    for name, a in (("w", w), ("b", b), ("h0", h0), ("c0", c0)):
        if a.dtype is not gi.dtype or not a.dtype.is_floating_point:
            raise DTypeError(f"lstm_layer: expected floating point operands of one dtype, got {name} "
                             f"of dtype {a.dtype.name} (gi: {gi.dtype.name})")
    return Aval((L, 6 * H, N), gi.dtype, gi.device)


LSTM_LAYER = defprim("lstm_layer", _lstm_layer_impl, _lstm_layer_rule, None, kind="other")


def _lstm_layer_backward_impl(xp, d_out, d_hn, d_cn, Z, w, h0, c0, reverse=False):
    """-> one flat array: d gi (L, N, 4H) | d w (4H, H) | d b (4H) | d h0 (H, N) | d c0 (H, N)."""
    L, six, N = Z.shape
    H = six // 6
    n_g = 4 * H * L * N
    n_w = 4 * H * H
    res = xp.empty(n_g + n_w + 4 * H + 2 * H * N, dtype=Z.dtype)
    G = res[:n_g].reshape(L, N, 4 * H)
    wt = xp.ascontiguousarray(w.T)
    order = list(_order(L, reverse))
    dh, dc = d_hn, d_cn
    dg = xp.empty((4 * H, N), dtype=Z.dtype)
    di, df, dgg, do = dg[:H], dg[H:2 * H], dg[2 * H:3 * H], dg[3 * H:]
    for k in range(L - 1, -1, -1):
        t = order[k]
        z = Z[t]
        c_t = z[H:2 * H]
        i, f, g, o = z[2 * H:3 * H], z[3 * H:4 * H], z[4 * H:5 * H], z[5 * H:]
        c_prev = c0 if k == 0 else Z[order[k - 1], H:2 * H]
        dh = dh + d_out[t]
        tc = xp.tanh(c_t)
        dh_o = dh * o
        # do = dh * o * tanh(c) * (1 - o)
        xp.subtract(1, o, out=do)
        do *= dh_o
        do *= tc
        # dct = dc + dh * o * (1 - tanh(c)^2)
        tc *= tc
        xp.subtract(1, tc, out=tc)
        tc *= dh_o
        tc += dc
        dct = tc
        # di = dct * g * i * (1 - i) and df = dct * c_prev * f * (1 - f): i and f are one
        # block in Z and in dg, so their sigmoid derivative is one pass
        d_if, s_if = dg[:2 * H], z[2 * H:4 * H]
        xp.subtract(1, s_if, out=d_if)
        d_if *= s_if
        di *= g
        df *= c_prev
        d_if.reshape(2, H, N)[...] *= dct
        xp.multiply(g, g, out=dgg)          # dg = dct * i * (1 - g^2)
        xp.subtract(1, dgg, out=dgg)
        dgg *= i
        dgg *= dct
        G[t] = dg.T
        dc = dct * f
        dh = _matmul(xp, wt, dg)
    # d w = sum_t dg_t @ h_{t-1}^T: one GEMM over all steps, h_{t-1} gathered in G's order
    hprev = xp.empty((L, N, H), dtype=Z.dtype)
    for k, t in enumerate(order):
        hprev[t] = (h0 if k == 0 else Z[order[k - 1], :H]).T
    G2 = G.reshape(L * N, 4 * H)
    dw = _matmul(xp, G2.T, hprev.reshape(L * N, H))
    res[n_g:n_g + n_w] = dw.reshape(-1)
    res[n_g + n_w:n_g + n_w + 4 * H] = G2.sum(axis=0)
    res[n_g + n_w + 4 * H:n_g + n_w + 4 * H + H * N] = dh.reshape(-1)
    res[n_g + n_w + 4 * H + H * N:] = dc.reshape(-1)
    return res


def _lstm_layer_backward_rule(d_out: Aval, d_hn: Aval, d_cn: Aval, Z: Aval, w: Aval, h0: Aval, c0: Aval,
                              reverse=False):
    L, six, N = Z.shape
    H = six // 6
    if d_out.shape != (L, H, N) or d_hn.shape != (H, N) or d_cn.shape != (H, N):
        raise ShapeError(f"lstm_layer_backward: gradients {d_out.shape}, {d_hn.shape}, {d_cn.shape} do "
                         f"not fit the layer's (L, H, N) = {(L, H, N)}")
    return Aval((4 * H * L * N + 4 * H * H + 4 * H + 2 * H * N,), Z.dtype, Z.device)


LSTM_LAYER_BACKWARD = defprim("lstm_layer_backward", _lstm_layer_backward_impl, _lstm_layer_backward_rule,
                              None, kind="other")


def lstm_layer(gi, w, b, h0, c0, reverse: bool = False):
    """The forward time loop of one LSTM layer (see above): -> Z (L, 6H, N). Not
    differentiable by itself: `tracejit.nn.lstm_layer.lstm_layer_fm` is."""
    return bind(LSTM_LAYER, gi, w, b, h0, c0, reverse=bool(reverse))


def lstm_layer_backward(d_out, d_hn, d_cn, Z, w, h0, c0, reverse: bool = False):
    """The backward time loop of `lstm_layer`: -> the flat (d gi | d w | d b | d h0 | d c0)."""
    return bind(LSTM_LAYER_BACKWARD, d_out, d_hn, d_cn, Z, w, h0, c0, reverse=bool(reverse))
