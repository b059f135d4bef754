"""Eager recurrent cells: a step's gate blocks as one autograd node (`chunk_gates`), and
an LSTM cell's gate math as one (`lstm_cell_gates`).

An LSTM or GRU cell splits its gate pre-activations into equal blocks; `ops.chunk` makes
one ``getitem`` per block, whose backward writes a full-size zero tensor with one slice
filled, then the engine sums them. `chunk_gates` is one node whose backward is one
``cat`` (captured graphs get the same from jit/slice_grads.py). The layers (RNN, LSTM,
GRU) run their whole time loops as one op each way (ops/rnn_layer.py, lstm_layer.py,
gru_layer.py), hidden-weight gradient included.

An LSTMCell stepped by a Python loop has no layer op: its gate math (three sigmoids, two
tanh, the cell update: ~10 ops forward, ~20 backward, each with dispatch and a graph
node) is `lstm_cell_gates`, one node computed on the arrays, as PyTorch's eager cell is
one fused kernel. Its backward is written on the arrays too, except under
``create_graph``, where it differentiates the same math written with tracejit ops.
"""
from __future__ import annotations

import numpy as np

from .. import ops as _ops
from ..autograd.function import Function
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..ops import registry as _reg
from ..tensor import Tensor

__all__ = ["chunk_gates", "lstm_cell_gates"]


class _ChunkGates(Function):
    """``chunk(gates, n, -1)`` as one node whose backward is one ``cat`` of the pieces'
    gradients. `ops.chunk` makes n `getitem`s, each of whose backward writes a full-size
    zero tensor with one slice filled, then summed: per step, n index_adds and n-1 adds."""

    @staticmethod
    def forward(ctx, gates, n):
        ctx.set_materialize_grads(False)
        ctx.meta = (tuple(gates.shape), gates.dtype, gates.device, n)
        return _ops.chunk(gates, n, -1)

    @staticmethod
    def backward(ctx, *grads):
        shape, dtype, device, n = ctx.meta
        piece = shape[:-1] + (shape[-1] // n,)
        parts = [g if g is not None else _ops.zeros(piece, dtype=dtype, device=device) for g in grads]
        return _ops.cat(parts, -1), None


def chunk_gates(gates, n: int) -> tuple:
    """The n equal gate blocks of `gates` along the last dim (eager: one autograd node)."""
    if (_reg.trace_state.tracer is None and gates.requires_grad and is_grad_enabled()
            and gates.shape[-1] % n == 0):
        return _ChunkGates.apply(gates, n)
    return _ops.chunk(gates, n, -1)


def _cell_math(gates, c):
    """(h', c') from the gate pre-activations (i, f, g, o blocks) and c, with tracejit ops:
    the cell's one definition (ops/lstm_layer.py `lstm_cell`), which `_LSTMCellGates`
    computes on arrays."""
    from ..ops.lstm_layer import lstm_cell
    return lstm_cell(*chunk_gates(gates, 4), c)


class _LSTMCellGates(Function):
    """``_cell_math`` as one node: forward and backward on the arrays (CPU)."""

    @staticmethod
    def forward(ctx, gates, c):
        ctx.set_materialize_grads(False)
        x, cp = gates._data, c._data
        H = x.shape[-1] // 4
        # one tanh over all four blocks: sigmoid(v) = (1 + tanh(v / 2)) / 2 for i, f, o,
        # within an ulp or two of sigmoid's own form and ~3x faster than its exp and where
        t = np.tanh(x * _half_scale(H, x.dtype))
        s = t * x.dtype.type(0.5)
        s += x.dtype.type(0.5)
        s[..., 2 * H:3 * H] = t[..., 2 * H:3 * H]      # s: the four activations (g: tanh)
        si, sf, tg, so = s[..., :H], s[..., H:2 * H], s[..., 2 * H:3 * H], s[..., 3 * H:]
        c_new = sf * cp
        c_new += si * tg
        tc = np.tanh(c_new)
        h = so * tc
        ctx.arrays = (s, tc, cp)
        ctx.meta = (gates.dtype, gates.device)
        ctx.save_for_backward(gates, c)
        return Tensor._wrap(h, gates.dtype, gates.device), Tensor._wrap(c_new, gates.dtype, gates.device)

    @staticmethod
    def backward(ctx, dh, dc):
        if is_grad_enabled():   # create_graph: the gradient must itself be differentiable
            gates, c = ctx.saved_tensors
            from ..autograd import grad
            with enable_grad():
                outs = [(o, d) for o, d in zip(_cell_math(gates, c), (dh, dc)) if d is not None]
                want = [t for t in (gates, c) if t.requires_grad]
                got = iter(grad([o for o, _ in outs], want, [d for _, d in outs],
                                create_graph=True, allow_unused=True))
                return tuple(next(got) if t.requires_grad else None for t in (gates, c))
        s, tc, cp = ctx.arrays
        dtype, device = ctx.meta
        H = tc.shape[-1]
        if dh is None and dc is None:
            return None, None
        one = s.dtype.type(1)
        si, sf, tg, so = s[..., :H], s[..., H:2 * H], s[..., 2 * H:3 * H], s[..., 3 * H:]
        # d gates = (upstream factor per block) * (the activation's derivative), the latter
        # for all four blocks in one pass: s (1 - s) for the sigmoids, 1 - tanh^2 for g
        d_gates = one - s
        d_gates *= s
        np.multiply(tg, tg, out=d_gates[..., 2 * H:3 * H])
        np.subtract(one, d_gates[..., 2 * H:3 * H], out=d_gates[..., 2 * H:3 * H])
        up = np.empty_like(s)
        if dh is not None:
            d = dh._data
            dcn = tc * tc                                   # the total cotangent of c'
            np.subtract(one, dcn, out=dcn)
            dcn *= so
            dcn *= d
            if dc is not None:
                dcn += dc._data
            np.multiply(d, tc, out=up[..., 3 * H:])
        else:
            dcn = np.array(dc._data, dtype=s.dtype, order="C")
            up[..., 3 * H:] = 0
        np.multiply(dcn, tg, out=up[..., :H])
        np.multiply(dcn, cp, out=up[..., H:2 * H])
        np.multiply(dcn, si, out=up[..., 2 * H:3 * H])
        d_gates *= up
        dcn *= sf
        return Tensor._wrap(d_gates, dtype, device), Tensor._wrap(dcn, dtype, device)


_SCALES: dict = {}


def _half_scale(H: int, dtype) -> np.ndarray:
    """The tanh arguments' scale per gate column: 1/2 for the sigmoid blocks (i, f, o), 1
    for g (made once per size and dtype)."""
    key = (H, dtype)
    scale = _SCALES.get(key)
    if scale is None:
        scale = np.full(4 * H, 0.5, dtype=dtype)
        scale[2 * H:3 * H] = 1.0
        scale.flags.writeable = False
        _SCALES[key] = scale
    return scale


def lstm_cell_gates(gates, c) -> tuple:
    """(h', c') of one LSTM cell step from its gate pre-activations (PyTorch's order i, f,
    g, o) and its cell state: one autograd node eagerly on the CPU, tracejit ops otherwise
    (captured graphs fuse them)."""
    if (_reg.trace_state.tracer is None and gates.device.type == "cpu" and c.device.type == "cpu"
            and gates.dtype.is_floating_point and gates.dtype == c.dtype
            and tuple(gates.shape[:-1]) == tuple(c.shape[:-1]) and gates.shape[-1] == 4 * c.shape[-1]):
        return _LSTMCellGates.apply(gates, c)
    return _cell_math(gates, c)
