"""Eager recurrent cells: a step's gate blocks as one autograd node (`chunk_gates`).

An LSTM or GRU cell splits its gate pre-activations into equal blocks; `ops.chunk` makes
one ``getitem`` per block, whose backward writes a full-size zero tensor with one slice
filled, then the engine sums them. `chunk_gates` is one node whose backward is one
``cat`` (captured graphs get the same from jit/slice_grads.py). The layers (RNN, LSTM,
GRU) run their whole time loops as one op each way (ops/rnn_layer.py, lstm_layer.py,
gru_layer.py), hidden-weight gradient included.
"""
from __future__ import annotations

from .. import ops as _ops
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..ops import registry as _reg

__all__ = ["chunk_gates"]


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
