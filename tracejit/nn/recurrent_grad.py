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
node) is `lstm_cell_gates`, one node computed on the arrays by the LSTM layer's numpy
step, as PyTorch's eager cell is one fused kernel; under ``create_graph`` its backward
differentiates the same math written with tracejit ops.
"""
from __future__ import annotations

import numpy as np

from .. import ops as _ops
from ..autograd.function import Function
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..ops import registry as _reg
from ..ops.lstm_prim import cell_backward, cell_forward
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
    """``_cell_math`` as one node, forward and backward on the arrays (CPU) by the LSTM
    layer's numpy step (ops/lstm_prim.py `cell_forward`, `cell_backward`) on the
    transposed views of (N, 6H) rows: (h, c, i, f, g, o) per batch row."""

    @staticmethod
    def forward(ctx, gates, c):
        ctx.set_materialize_grads(False)
        x, cp = gates._data, c._data
        H = cp.shape[-1]
        rows = np.empty((x.size // (4 * H), 6 * H), dtype=x.dtype)
        rows[:, 2 * H:] = x.reshape(-1, 4 * H)
        cpt = cp.reshape(-1, H).T
        cell_forward(np, rows.T, cpt)
        ctx.arrays = (rows, cpt)
        ctx.meta = (gates.dtype, gates.device, tuple(gates.shape))
        ctx.save_for_backward(gates, c)
        shape = tuple(cp.shape)
        return (Tensor._wrap(rows[:, :H].reshape(shape), gates.dtype, gates.device),
                Tensor._wrap(rows[:, H:2 * H].reshape(shape), gates.dtype, gates.device))

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
        if dh is None and dc is None:
            return None, None
        rows, cpt = ctx.arrays
        dtype, device, shape = ctx.meta
        H, n = cpt.shape
        zero = np.zeros((H, n), dtype=rows.dtype)
        dht = zero if dh is None else dh._data.reshape(n, H).T
        dct = zero if dc is None else dc._data.reshape(n, H).T
        d_gates = np.empty((n, 4 * H), dtype=rows.dtype)
        d_c = cell_backward(np, rows.T, cpt, dht, dct, d_gates.T)
        return (Tensor._wrap(d_gates.reshape(shape), dtype, device),
                Tensor._wrap(np.ascontiguousarray(d_c.T).reshape(shape[:-1] + (H,)), dtype, device))


def lstm_cell_gates(gates, c) -> tuple:
    """(h', c') of one LSTM cell step from its gate pre-activations (PyTorch's order i, f,
    g, o) and its cell state: one autograd node eagerly on the CPU, tracejit ops otherwise
    (captured graphs fuse them)."""
    if (_reg.trace_state.tracer is None and gates.device.type == "cpu" and c.device.type == "cpu"
            and gates.dtype.is_floating_point and gates.dtype == c.dtype
            and tuple(gates.shape[:-1]) == tuple(c.shape[:-1]) and gates.shape[-1] == 4 * c.shape[-1]):
        return _LSTMCellGates.apply(gates, c)
    return _cell_math(gates, c)
