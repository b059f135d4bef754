"""One GRU layer (one direction) over a whole sequence: one op forward, one backward.

As `tracejit.ops.lstm_layer`: the time loops are the ``gru_layer`` and
``gru_layer_backward`` primitives (ops/gru_prim.py), run eagerly by `_GRULayer` (an
autograd Function); captured, the layer is ``gru_layer`` and ``gru_layer_states``. Second
derivatives recompute the layer with `gru_cell` (tracejit ops) and differentiate it twice.

Layout (see ops/gru_prim.py): gi (L, N, 3H) with b_ih added; w_hh (3H, H); b_hh (3H,);
feature-major h0 (H, N); outputs: h of every step (L, H, N) and h_n (H, N).
"""
from __future__ import annotations

from .. import ops as _ops
from ..autograd.function import Function
from ..errors import CompileError
from .gru_prim import gru_layer, gru_layer_backward, gru_layer_states, unpack_backward
from .eager import trace_state
from .lstm_layer import _requiring, recompute_steps, twice_differentiated

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


class _GRULayer(Function):

    @staticmethod
    def forward(ctx, gi, w, b, h0, reverse, batch_sizes=None):
        ctx.set_materialize_grads(False)
        Z = gru_layer(gi, w, b, h0, reverse, batch_sizes)
        ctx.reverse, ctx.batch_sizes = reverse, batch_sizes
        ctx.save_for_backward(gi, w, b, h0, Z)
        H = w.shape[1]
        return Z[:, :H], Z[0 if reverse else -1, :H]

    @staticmethod
    def backward(ctx, d_out, d_hn):
        gi, w, b, h0, Z = ctx.saved_tensors
        L, N, three = gi.shape
        H = three // 3
        d_out = _ops.zeros((L, H, N), dtype=gi.dtype, device=gi.device) if d_out is None else d_out
        d_hn = _ops.zeros((H, N), dtype=gi.dtype, device=gi.device) if d_hn is None else d_hn
        res = gru_layer_backward(d_out, d_hn, gi, w, b, h0, Z, ctx.reverse, ctx.batch_sizes)
        return unpack_backward(res, L, N, H) + (None, None)


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
    return _GRULayer.apply(gi, w, bias, h0, bool(reverse),
                           None if batch_sizes is None else tuple(batch_sizes))


def backward_vjp(u, d_y, d_hn, gi, w, b, h0, reverse: bool, batch_sizes=None) -> tuple:
    """VJP of ``gru_layer_backward`` (second derivatives), eagerly, as
    `tracejit.ops.lstm_layer.backward_vjp`: autograd twice over the recomputed forward.
    -> gradients of (d_y, d_hn, gi, w, b, h0)."""
    from ..autograd import enable_grad
    if trace_state.tracer is not None:
        raise CompileError("second derivatives of a GRU layer inside a compiled function are not "
                           "supported; take them eagerly (tracejit.eager())")
    with enable_grad():
        L, N, three = gi.shape
        H = three // 3
        ins = [_requiring(t) for t in (gi, w, b, h0)]
        ds = [_requiring(t) for t in (d_y, d_hn)]
        hs = [h for h, _ in recompute_steps(lambda g, m, h, c: (gru_cell_fm(g, m, h), None), *ins, reverse,
                                            batch_sizes)]
        outs = hs + [hs[0 if reverse else L - 1]]
        cts = [ds[0][t] for t in range(L)] + [ds[1]]
        return twice_differentiated(outs, cts, ins, unpack_backward(u, L, N, H), ds + ins)
