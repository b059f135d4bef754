"""`unbind_steps` and `chunk_pieces`: the pieces of a tensor along a dim as one autograd
node, whose backward stacks or concatenates their gradients (an eager scan's xs,
attention's packed q/k/v, a recurrent step's gate blocks)."""
from __future__ import annotations

from .. import ops
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..tensor import Tensor
from .eager import trace_state

__all__ = ["unbind_steps", "chunk_pieces"]


class _Pieces(Function):
    """The pieces of `x` along `dim` as one autograd node whose backward is one ``stack``
    (the slices ``x[k]``, `n` None) or ``cat`` (`n` equal chunks) of their gradients, zeros
    where a piece got none. Slicing piece by piece instead would make each piece's backward
    a full-size zero tensor with one part filled in, summed over the pieces: O(n^2) memory
    traffic for n pieces (a scan's T steps)."""

    @staticmethod
    def forward(ctx, x, dim, n):
        ctx.set_materialize_grads(False)
        shape = list(x.shape)
        if n is None:
            del shape[dim]
            lead = (slice(None),) * dim
            pieces = tuple(x[lead + (k,)] for k in range(x.shape[dim]))
        else:
            shape[dim] //= n
            pieces = ops.chunk(x, n, dim)
        ctx.meta = (tuple(shape), x.dtype, x.device, dim, n)
        return pieces

    @staticmethod
    def backward(ctx, *grads):
        shape, dtype, device, dim, n = ctx.meta
        missing = any(g is None for g in grads)   # (one zero tensor serves them all)
        zero = ops.zeros(shape, dtype=dtype, device=device) if missing else None
        parts = [zero if g is None else g for g in grads]
        return (ops.stack(parts, dim) if n is None else ops.cat(parts, dim)), None, None


def unbind_steps(x: Tensor, dim: int = 0) -> tuple:
    """``x.unbind(dim)`` for an eager scan: when `x` needs gradients the slices share one
    backward node that stacks their gradients along `dim` (see `_Pieces`). ``dim``
    (>= 0): attention's packed q/k/v are cut along axis 2 of [N, T, 3, H, hd], so their
    gradient is stacked straight into the layout of the projection's GEMM."""
    if x.shape[dim] and x.requires_grad and x.dtype.is_floating_point and is_grad_enabled():
        return _Pieces.apply(x, dim, None)
    lead = (slice(None),) * dim
    return tuple(x[lead + (k,)] for k in range(x.shape[dim]))


def chunk_pieces(x: Tensor, n: int, dim: int) -> tuple:
    """``chunk(x, n, dim)`` into n equal blocks (a recurrent step's gates): eagerly, when `x`
    needs gradients, one node whose backward is one ``cat`` (see `_Pieces`)."""
    if (trace_state.tracer is None and x.requires_grad and is_grad_enabled()
            and x.shape[dim] % n == 0):
        return _Pieces.apply(x, dim, n)
    return ops.chunk(x, n, dim)
