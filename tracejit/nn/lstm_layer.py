"""An eager LSTM layer (one direction) as one autograd node over the whole sequence.

Run step by step, an eager LSTM records a graph node or three per time step and layer
(hidden projection, gate math, state split) and each step's backward goes through the
engine, with the per-step slicing, stacking and accumulation around it: for a 2-layer,
64-step LM step that per-step bookkeeping cost more than the gate math itself. Here the
forward and backward time loops are one primitive each (`tracejit.ops.lstm_prim`:
``lstm_layer``, ``lstm_layer_backward``), like PyTorch's CPU LSTM (oneDNN's layer
forward/backward), and this Function makes the pair differentiable:

- a plain backward (no graph recorded) calls ``lstm_layer_backward``: the gate
  gradients of all steps are written into one (L, N, 4H) buffer, which is both the input
  projection's gradient and, in one GEMM, the hidden weights' gradient;
- ``create_graph=True`` recomputes the forward with tracejit ops from the saved inputs
  and runs the backward recurrence with tracejit ops, so higher derivatives are exact.

Layout (see ops/lstm_prim.py): gi (L, N, 4H), w_hh (4H, H); feature-major states h0
and c0 (H, N); outputs: h of every step (L, H, N), h_n and c_n (H, N). Captured (traced or
scripted) layers do not come here: nn/recurrent.py runs them as a `scan`.
"""
from __future__ import annotations

from .. import ops as _ops
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..ops.lstm_prim import lstm_layer, lstm_layer_backward

__all__ = ["lstm_layer_fm"]


class _LSTMLayer(Function):

    @staticmethod
    def forward(ctx, gi, w, b, h0, c0, reverse):
        ctx.set_materialize_grads(False)
        ctx.has_bias = b is not None
        if b is None:
            b = _ops.zeros(w.shape[0], dtype=w.dtype, device=w.device)
        Z = lstm_layer(gi, w, b, h0, c0, reverse)
        ctx.reverse = reverse
        ctx.save_for_backward(gi, w, b, h0, c0, Z)
        H = w.shape[1]
        last = 0 if reverse else gi.shape[0] - 1
        return Z[:, :H], Z[last, :H], Z[last, H:2 * H]

    @staticmethod
    def backward(ctx, d_out, d_hn, d_cn):
        gi, w, b, h0, c0, Z = ctx.saved_tensors
        if is_grad_enabled():
            return _recorded_backward(gi, w, b, h0, c0, ctx.reverse, d_out, d_hn, d_cn, ctx.has_bias)
        L, N, four = gi.shape
        H = four // 4
        zeros = lambda *s: _ops.zeros(s, dtype=gi.dtype, device=gi.device)  # noqa: E731
        d_out = zeros(L, H, N) if d_out is None else d_out
        d_hn = zeros(H, N) if d_hn is None else d_hn
        d_cn = zeros(H, N) if d_cn is None else d_cn
        res = lstm_layer_backward(d_out, d_hn, d_cn, Z, w, h0, c0, ctx.reverse)
        n_g, n_w = four * L * N, four * H
        d_gi = _ops.reshape(res[:n_g], (L, N, four))
        d_w = _ops.reshape(res[n_g:n_g + n_w], (four, H))
        d_b = res[n_g + n_w:n_g + n_w + four] if ctx.has_bias else None
        n_g += n_w + four
        d_h0 = _ops.reshape(res[n_g:n_g + H * N], (H, N))
        d_c0 = _ops.reshape(res[n_g + H * N:], (H, N))
        return d_gi, d_w, d_b, d_h0, d_c0, None


def _recorded_backward(gi, w, b, h0, c0, reverse, d_out, d_hn, d_cn, has_bias):
    """The layer's VJP with tracejit ops (create_graph=True): the forward recomputed
    from the saved inputs, then the backward recurrence, both recorded."""
    L = gi.shape[0]
    order = range(L - 1, -1, -1) if reverse else range(L)
    saved = {}
    h, c = h0, c0
    for t in order:
        gates = _ops.transpose(gi[t], 0, 1) + _ops.matmul(w, h) + _ops.reshape(b, (b.shape[0], 1))
        i, f, g, o = _ops.chunk(gates, 4, 0)
        i, f, g, o = _ops.sigmoid(i), _ops.sigmoid(f), _ops.tanh(g), _ops.sigmoid(o)
        saved[t] = (i, f, g, o, h, c)
        c = f * c + i * g
        h = o * _ops.tanh(c)
        saved[t] += (c,)
    dh, dc = d_hn, d_cn
    d_gi = [None] * L
    d_w = None
    wt = _ops.transpose(w, 0, 1)
    for t in reversed(list(order)):
        i, f, g, o, h_prev, c_prev, c_t = saved[t]
        if d_out is not None:
            dh = d_out[t] if dh is None else dh + d_out[t]
        tc = _ops.tanh(c_t)
        dct = dc
        if dh is not None:
            dct_h = dh * o * (1.0 - tc * tc)
            dct = dct_h if dct is None else dct + dct_h
        if dct is None:
            dct = _ops.zeros_like(c_t)
        d_o = dh * tc * o * (1.0 - o) if dh is not None else _ops.zeros_like(o)
        dg = _ops.cat([dct * g * i * (1.0 - i), dct * c_prev * f * (1.0 - f), dct * i * (1.0 - g * g), d_o], 0)
        d_gi[t] = _ops.transpose(dg, 0, 1)
        d_wt = _ops.matmul(dg, _ops.transpose(h_prev, 0, 1))
        d_w = d_wt if d_w is None else d_w + d_wt
        dc = dct * f
        dh = _ops.matmul(wt, dg)
    G = _ops.stack(d_gi, 0)
    d_b = _ops.sum(G, (0, 1)) if has_bias else None
    return G, d_w, d_b, dh, dc, None


def lstm_layer_fm(gi, w, h0, c0, reverse: bool = False, bias=None) -> tuple:
    """One eager LSTM layer and direction: gi (L, N, 4H) is the input projection, w the hidden weights (4H, H), h0 and c0 (H, N), bias (4H,) or None (the
    sum of both biases, added at each step). Returns (h of every step (L, H, N), h_n
    (H, N), c_n (H, N))."""
    return _LSTMLayer.apply(gi, w, bias, h0, c0, bool(reverse))
