"""Eager recurrent layers: the hidden weights' gradient as one GEMM over all time steps.

Run step by step under eager autograd, a recurrent layer's backward computes at every
step both ``dh = dgates @ W_hh`` (needed by the previous step) and the step's share of
the weight gradient ``dgates^T @ h`` (plus ``dgates.sum(0)`` for the bias): 2T small
GEMMs for T steps. Only the first kind is sequential. Here the per-step hidden
projection is `_HiddenProj`, which in backward computes ``dh`` and keeps ``dgates``;
`_HiddenWeights`, a node every step's projection depends on, runs after all of them
(the engine orders nodes by dependency) and computes the weight and bias gradients as
one GEMM and one reduction over the stacked steps. The compiled scan's VJP does the
same rewrite on the IR (`tracejit.jit.scan_ad`).

Both backwards are written with tracejit ops on the real weight and hidden states, so
``create_graph=True`` records a differentiable backward as the per-step form would.
"""
from __future__ import annotations

from .. import ops as _ops
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..ops import registry as _reg

__all__ = ["DeferredHiddenGrad", "chunk_gates"]


class _Pending:
    """What the steps' backwards hand to `_HiddenWeights` in one backward pass: per step
    that ran, its incoming hidden state and output gradient. Holds no tensors between
    passes, so the graph keeps no reference cycle through it (it is freed by reference
    counting as soon as the loss is dropped, as the per-step form is)."""

    __slots__ = ("has_bias", "steps")

    def __init__(self, has_bias: bool):
        self.has_bias = has_bias
        self.steps: list = []           # (h, g) in the order the steps' backwards ran


class _HiddenWeights(Function):
    """A 0-d anchor whose backward turns the per-step gradients kept by `_HiddenProj`
    into the gradients of W_hh (and b_hh)."""

    @staticmethod
    def forward(ctx, w, b, pending):
        ctx.pending = pending
        return _ops.zeros((), dtype=w.dtype, device=w.device)

    @staticmethod
    def backward(ctx, count):
        p = ctx.pending
        # `count` is the number of steps whose backward ran in this pass (each feeds a 1):
        # the last `count` entries. Entries left by an earlier pass that did not reach this
        # node (``autograd.grad`` of other inputs over a retained graph) are not this pass's.
        c = int(round(float(count.detach().numpy())))
        steps = p.steps[len(p.steps) - c:] if c else []
        p.steps = []
        if not steps:
            return None, None, None
        G = _ops.cat([g for _, g in steps], 0)      # (T*N, G*H)
        H = _ops.cat([h for h, _ in steps], 0)      # (T*N, H)
        dw = _ops.matmul(_ops.transpose(G, 0, 1), H)
        db = G.sum(0) if p.has_bias else None
        return dw, db, None


class _HiddenProj(Function):
    """``h @ W^T + b`` for one step; its backward returns ``dh`` and hands ``(h, dgates)``
    to `_HiddenWeights` (which it feeds a 1, so that node runs after every step's and
    learns how many ran)."""

    @staticmethod
    def forward(ctx, h, w, b, anchor, pending):
        ctx.pending = pending
        ctx.save_for_backward(h, w)
        return _ops.linear(h, w, b)

    @staticmethod
    def backward(ctx, g):
        h, w = ctx.saved_tensors
        ctx.pending.steps.append((h, g))
        dh = _ops.matmul(g, w) if ctx.needs_input_grad[0] else None
        return dh, None, None, _ops.ones((), dtype=g.dtype, device=g.device), None


class DeferredHiddenGrad:
    """The hidden projection ``h @ W_hh^T + b_hh`` of one layer and direction over a
    sequence, with the weight gradient deferred to one GEMM (see the module docstring).
    Call it once per step with the step's incoming hidden state. Falls back to plain ops
    when no gradient of the weights is recorded (no_grad, frozen weights, tracing)."""

    def __init__(self, w, b):
        self.w, self.b = w, b
        needs = w.requires_grad or (b is not None and b.requires_grad)
        self.active = needs and is_grad_enabled() and _reg.trace_state.tracer is None
        self.pending = _Pending(b is not None)
        self.anchor = _HiddenWeights.apply(w, b, self.pending) if self.active else None

    def __call__(self, h):
        if not self.active:
            return _ops.linear(h, self.w, self.b)
        return _HiddenProj.apply(h, self.w, self.b, self.anchor, self.pending)


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
