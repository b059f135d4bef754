"""`unbind_steps`: the slices of a tensor along a dim as one autograd node, whose backward
stacks their gradients (an eager scan's xs, attention's packed q/k/v)."""
from __future__ import annotations

from .. import ops
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..tensor import Tensor

__all__ = ["unbind_steps"]


class _UnbindSteps(Function):
    """The slices ``x[0], x[1], ...`` of a scan's xs as one autograd node whose backward is
    one ``stack`` of the slices' gradients (zeros where a slice got none). Slicing with
    ``x[k]`` instead would make each step's backward a full-size zero tensor with one
    slice filled in, summed over the steps: O(T^2) memory traffic for T steps."""

    @staticmethod
    def forward(ctx, x, dim=0):
        ctx.set_materialize_grads(False)
        ctx.meta = (tuple(x.shape[:dim]) + tuple(x.shape[dim + 1:]), x.dtype, x.device, dim)
        lead = (slice(None),) * dim
        return tuple(x[lead + (k,)] for k in range(x.shape[dim]))

    @staticmethod
    def backward(ctx, *grads):
        shape, dtype, device, dim = ctx.meta
        zero = None
        parts = []
        for g in grads:
            if g is None:
                if zero is None:
                    zero = ops.zeros(shape, dtype=dtype, device=device)
                g = zero
            parts.append(g)
        return ops.stack(parts, dim), None


def unbind_steps(x: Tensor, dim: int = 0) -> tuple:
    """``x.unbind(dim)`` for an eager scan: when `x` needs gradients the slices share one
    backward node that stacks their gradients along `dim` (see `_UnbindSteps`). ``dim``
    (>= 0): attention's packed q/k/v are cut along axis 2 of [N, T, 3, H, hd], so their
    gradient is stacked straight into the layout of the projection's GEMM."""
    if x.shape[dim] and x.requires_grad and x.dtype.is_floating_point and is_grad_enabled():
        return _UnbindSteps.apply(x, dim)
    lead = (slice(None),) * dim
    return tuple(x[lead + (k,)] for k in range(x.shape[dim]))
