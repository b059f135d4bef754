"""One Elman RNN layer (tanh or relu, one direction) over a whole sequence: one op forward,
one backward.

As `tracejit.ops.lstm_layer`: the time loops are the ``rnn_layer`` and
``rnn_layer_backward`` primitives (ops/rnn_prim.py). The layer's result is its states, so
``rnn_layer`` is differentiable as it is. Second derivatives recompute the layer with
`rnn_cell` (tracejit ops) and differentiate it twice.

Layout (see ops/rnn_prim.py): gi (L, N, H) with b_ih added; w_hh (H, H); b_hh (H,);
feature-major h0 (H, N); outputs: h of every step (L, H, N) and h_n (H, N).
"""
from __future__ import annotations

from .. import ops as _ops
from .rnn_prim import rnn_layer, unpack_backward
from .lstm_layer import _requiring, recompute_steps, recomputed_vjp, twice_differentiated

__all__ = ["rnn_layer_fm", "rnn_cell", "backward_vjp"]


def rnn_cell(pre, nonlinearity: str):
    """The RNN cell's math, written once for every tensor form (this layer's recompute,
    nn.RNNCell's steps): `pre` = W_ih x + b_ih + W_hh h + b_hh, any layout."""
    return _ops.tanh(pre) if nonlinearity == "tanh" else _ops.relu(pre)


def rnn_layer_fm(gi, w, h0, reverse: bool = False, bias=None, nonlinearity: str = "tanh",
                 batch_sizes=None) -> tuple:
    """One RNN layer and direction: gi (L, N, H) the input projection with b_ih, w the hidden
    weights (H, H), h0 (H, N), bias b_hh (H,) or None, `batch_sizes` a packed batch's
    per-step sequence counts (as `tracejit.ops.lstm_layer.lstm_layer_fm`).
    Returns (h of every step (L, H, N), h_n (H, N))."""
    if bias is None:
        bias = _ops.zeros(w.shape[0], dtype=w.dtype, device=w.device)
    hs = rnn_layer(gi, w, bias, h0, reverse, nonlinearity, batch_sizes)
    return hs, hs[0 if reverse else -1]


@recomputed_vjp("an RNN")
def backward_vjp(u, d_y, gi, w, b, h0, reverse: bool, nonlinearity: str, batch_sizes=None) -> tuple:
    """VJP of ``rnn_layer_backward`` (second derivatives), eagerly, as
    `tracejit.ops.lstm_layer.backward_vjp`: autograd twice over the recomputed forward.
    -> gradients of (d_y, gi, w, b, h0)."""
    L, N, H = gi.shape
    ins = [_requiring(t) for t in (gi, w, b, h0)]
    ds = [_requiring(d_y)]
    hs = [h for h, _ in recompute_steps(lambda g, m, h, c: (rnn_cell(g + m, nonlinearity), None), *ins,
                                        reverse, batch_sizes)]
    return twice_differentiated(hs, [ds[0][t] for t in range(L)], ins, unpack_backward(u, L, N, H), ds + ins)
