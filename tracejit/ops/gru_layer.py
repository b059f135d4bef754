"""One GRU layer (one direction) over a whole sequence: one op forward, one backward.

As `tracejit.ops.lstm_layer`: the time loops are the ``gru_layer`` and
``gru_layer_backward`` primitives (ops/gru_prim.py), run eagerly by lstm_layer's `_Layer`
(an autograd Function); captured, the layer is ``gru_layer`` and ``gru_layer_states``.
Second derivatives recompute the layer with `gru_cell` (tracejit ops) and differentiate it
twice.

Layout (see ops/gru_prim.py): gi (L, N, 3H) with b_ih added; w_hh (3H, H); b_hh (3H,);
feature-major h0 (H, N); outputs: h of every step (L, H, N) and h_n (H, N).
"""
from __future__ import annotations

from .. import ops as _ops
from .gru_prim import layer_grads, gru_layer, gru_layer_backward, gru_layer_states, unpack_backward
from .eager import trace_state
from .lstm_layer import Family, _Layer, _requiring, recompute_steps, recomputed_vjp, twice_differentiated

__all__ = ["gru_layer_fm", "gru_cell", "gru_cell_fm", "backward_vjp"]


def gru_cell(g_r, g_z, g_n, m_r, m_z, m_n, h):
    """The GRU cell's math, written once for every tensor form (this layer's recompute for
    second derivatives, nn.GRUCell's `gru_step`): input projections g (with b_ih) and
    hidden projections m (``W_hh h + b_hh``) per gate r, z, n (PyTorch's order), the state
    h, blocks of one shape in any layout: n = tanh(g_n + r * m_n), h' = n + z * (h - n)."""
    r = _ops.sigmoid(g_r + m_r)
    z = _ops.sigmoid(g_z + m_z)
    n = _ops.tanh(g_n + r * m_n)
    return n + z * (h - n)


def gru_cell_fm(g, m, h):
    """One GRU step, feature-major: g (3H, N) is the input projection (with b_ih), m (3H,
    N) the hidden projection ``W_hh h + b_hh``, h (H, N) the state."""
    return gru_cell(*_ops.chunk(g, 3, 0), *_ops.chunk(m, 3, 0), h)


GRU = Family(gru_layer, gru_layer_backward, layer_grads, 0)


def gru_layer_fm(gi, w, h0, reverse: bool = False, bias=None, batch_sizes=None) -> tuple:
    """One eager GRU layer and direction: gi (L, N, 3H) the input projection with b_ih, w
    the hidden weights (3H, H), h0 (H, N), bias b_hh (3H,) or None, `batch_sizes` a packed
    batch's per-step sequence counts (as `tracejit.ops.lstm_layer.lstm_layer_fm`).
    Returns (h of every step (L, H, N), h_n (H, N))."""
    if bias is None:
        bias = _ops.zeros(w.shape[0], dtype=w.dtype, device=w.device)
    if trace_state.tracer is not None:
        # captured: the primitives are the equations, differentiated by their records
        Z = gru_layer(gi, w, bias, h0, reverse, batch_sizes)
        hs = gru_layer_states(Z, gi, w, bias, h0, reverse, batch_sizes)
        return hs, hs[0 if reverse else -1]
    return _Layer.apply(GRU, bool(reverse), None if batch_sizes is None else tuple(batch_sizes), gi, w, bias, h0)


@recomputed_vjp("a GRU")
def backward_vjp(u, d_y, d_hn, gi, w, b, h0, reverse: bool, batch_sizes=None) -> tuple:
    """VJP of ``gru_layer_backward`` (second derivatives), eagerly, as
    `tracejit.ops.lstm_layer.backward_vjp`: autograd twice over the recomputed forward.
    -> gradients of (d_y, d_hn, gi, w, b, h0)."""
    L, N, three = gi.shape
    H = three // 3
    ins = [_requiring(t) for t in (gi, w, b, h0)]
    ds = [_requiring(t) for t in (d_y, d_hn)]
    hs = [h for h, _ in recompute_steps(lambda g, m, h, c: (gru_cell_fm(g, m, h), None), *ins, reverse,
                                        batch_sizes)]
    outs = hs + [hs[0 if reverse else L - 1]]
    cts = [ds[0][t] for t in range(L)] + [ds[1]]
    return twice_differentiated(outs, cts, ins, unpack_backward(u, L, N, H), ds + ins)
