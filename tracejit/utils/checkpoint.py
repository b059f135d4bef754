"""Activation checkpointing, as ``torch.utils.checkpoint``: ``checkpoint(fn, *args)`` and
``checkpoint_sequential(functions, segments, input)``.

With ``use_reentrant=True`` the function runs without recording a graph; its inputs are
kept and, in the backward pass, it runs again with the random-number state it first saw
and is differentiated then, so the activations inside it are not held between the passes.
As in PyTorch, that form needs an input that requires grad to record anything, and
accumulates into the parameters it reaches (``backward()``, not ``autograd.grad``).
``use_reentrant=False`` (PyTorch's recommendation) runs the function as it is: the same
numbers and gradients everywhere, ``autograd.grad`` and compiled steps included (a compiled
step plans its own memory), without freeing the activations in eager mode. A function that
updated its modules' buffers runs once more in the backward pass for those updates, as
PyTorch's eager recomputation does (a compiled step updates them once, as torch.compile's).
Selective checkpointing (``context_fn=partial(create_selective_checkpoint_contexts,
policy)``) is then met whatever the policy: every activation is kept.
"""
from __future__ import annotations

import contextlib
import enum
import warnings
import weakref
from typing import Any, Callable

from ..autograd.function import Function
from ..errors import user_stacklevel
from ..autograd.grad_mode import enable_grad, is_grad_enabled, no_grad
from ..ops import random as _random
from ..ops import registry as _reg
from ..tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential", "detach_variable", "noop_context_fn", "CheckpointError",
           "CheckpointPolicy", "create_selective_checkpoint_contexts", "set_checkpoint_early_stop",
           "set_checkpoint_debug_enabled"]


class CheckpointError(RuntimeError):
    """A recomputation that differs from the forward (PyTorch's class, for ``except``)."""


class CheckpointPolicy(enum.Enum):
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4
    PREFER_CPU_OFFLOAD = 5


def noop_context_fn() -> tuple:
    return contextlib.nullcontext(), contextlib.nullcontext()


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation: bool = False) -> tuple:
    """The (forward, recompute) contexts of selective checkpointing: nothing to do here,
    where a non-reentrant checkpoint keeps every activation (see the module docstring)."""
    if not (callable(policy_fn_or_list) or isinstance(policy_fn_or_list, list)):
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    return noop_context_fn()


@contextlib.contextmanager
def set_checkpoint_early_stop(enable: bool):
    """A recomputation stops early or not: the values are the same either way."""
    yield


set_checkpoint_debug_enabled = set_checkpoint_early_stop


def detach_variable(inputs: tuple) -> tuple:
    """`inputs` with each tensor detached, keeping whether it requires grad."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: {type(inputs).__name__}")
    return tuple(x.detach().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x for x in inputs)


class _Recompute(Function):
    """Runs `fn` without a graph; runs it again with a graph in the backward pass."""

    @staticmethod
    def forward(ctx, fn, preserve_rng_state, *args):
        ctx.fn, ctx.args = fn, args
        ctx.rng = _random.get_rng_state() if preserve_rng_state else None
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return fn(*args)

    @staticmethod
    def backward(ctx, *grads):
        from ..autograd import backward as _backward
        saved = iter(ctx.saved_tensors)
        args = [next(saved).detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a
                for a in ctx.args]
        out = _rerun(ctx.rng, enable_grad, ctx.fn, *args)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if pairs:
            _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) and a.requires_grad else None
                                    for a in args)


class _Replay(Function):
    """Passes its tensors through; the backward pass runs `fn` again without a graph, for
    the buffer updates PyTorch's recomputation makes (BatchNorm's running statistics)."""

    @staticmethod
    def forward(ctx, fn, args, kwargs, rng, *outs):
        ctx.fn, ctx.args, ctx.kwargs, ctx.rng = fn, args, kwargs, rng
        return tuple(o.view_as(o) for o in outs) if len(outs) > 1 else outs[0].view_as(outs[0])

    @staticmethod
    def backward(ctx, *grads):
        _rerun(ctx.rng, no_grad, ctx.fn, *ctx.args, **ctx.kwargs)
        return (None, None, None, None) + grads


def _rerun(rng, grad_mode, fn, *args, **kwargs):
    """fn(*args, **kwargs) under `grad_mode` from the generator state `rng` (when one was
    saved), the generator's state now put back afterwards."""
    now = _random.get_rng_state()
    try:
        if rng is not None:
            _random.set_rng_state(rng)
        with grad_mode():
            return fn(*args, **kwargs)
    finally:
        _random.set_rng_state(now)


def _buffers_of(fn) -> list:
    """The buffers of the modules `fn` is, is bound to, or holds in its closure (alone or
    in a list: checkpoint_sequential's segments)."""
    from ..nn.module import Module
    found = [fn, getattr(fn, "__self__", None)]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:   # (an empty cell)
            continue
        found.extend(v if isinstance(v, (list, tuple)) else (v,))
    from ..nn.module import state_epoch
    from ..nn.rebinds import rebind_epoch
    out: dict = {}
    for m in found:
        if isinstance(m, Module):
            kept = _BUFFERS.get(m)
            epoch = (state_epoch[0], rebind_epoch[0])
            if kept is None or kept[0] != epoch:   # (the tree changed: look again)
                kept = _BUFFERS[m] = (epoch, list(m.buffers()))
            out.update((id(b), b) for b in kept[1])
    return list(out.values())


# module -> (nn's state and rebind epochs, its buffers): a block checkpointed every step walks its
# module tree once, not per call (3% of a small Transformer layer's step)
_BUFFERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _run_noting_updates(fn, args, kwargs, preserve_rng_state):
    """``use_reentrant=False``: `fn` runs as it is. Where it updated its modules' buffers,
    the backward pass runs it once more, as PyTorch's recomputation does: a BatchNorm in a
    checkpointed block moves its running statistics twice per step there."""
    bufs = _buffers_of(fn)
    if not bufs:
        return fn(*args, **kwargs)
    before = [b._version for b in bufs]
    rng = _random.get_rng_state() if preserve_rng_state else None
    out = fn(*args, **kwargs)
    if all(b._version == v for b, v in zip(bufs, before)):
        return out
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not all(isinstance(o, Tensor) and o.dtype.is_floating_point for o in outs) \
            or not any(o.requires_grad for o in outs):
        return out   # (no backward reaches it: PyTorch recomputes nothing either)
    replayed = _Replay.apply(fn, args, kwargs, rng, *outs)
    if not isinstance(out, (tuple, list)):
        return replayed
    return type(out)(replayed) if len(outs) > 1 else type(out)((replayed,))


def checkpoint(function: Callable, *args, use_reentrant: bool | None = None,
               preserve_rng_state: bool = True, context_fn: Callable | None = None,
               determinism_check: str = "default", debug: bool = False, **kwargs) -> Any:
    """``function(*args, **kwargs)``, its activations recomputed in the backward pass
    (``use_reentrant=True``) or kept (``False``); see the module's docstring."""
    if use_reentrant is None:
        warnings.warn("checkpoint: pass use_reentrant explicitly (True or False); it defaults to "
                      "True, as in PyTorch", stacklevel=user_stacklevel())
        use_reentrant = True
    if not isinstance(use_reentrant, bool):
        raise TypeError(f"checkpoint: use_reentrant must be a bool, got {use_reentrant!r}")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check must be 'default' or 'none', got "
                         f"{determinism_check!r}")
    if use_reentrant and (kwargs or context_fn is not None):
        raise ValueError("checkpoint: keyword arguments to the function and context_fn need "
                         "use_reentrant=False")
    if context_fn is not None:
        fwd_ctx, _ = context_fn()
        with fwd_ctx:
            return function(*args, **kwargs)
    tracing = _reg.trace_state.tracer is not None
    if tracing or not is_grad_enabled():
        return function(*args, **kwargs)
    if not use_reentrant:
        return _run_noting_updates(function, args, kwargs, preserve_rng_state)
    if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn("checkpoint: none of the inputs requires grad; with use_reentrant=True the "
                      "output then carries no gradient", stacklevel=user_stacklevel())
    return _Recompute.apply(function, preserve_rng_state, *args)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None,
                          **kwargs) -> Any:
    """Runs `functions` (a Sequential or a list of modules) in `segments` checkpointed runs,
    the last one as it is, as PyTorch's does."""
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if not isinstance(segments, int) or not 1 <= segments <= max(len(fns), 1):
        raise ValueError(f"checkpoint_sequential: segments must be an int in 1..{len(fns)}, got "
                         f"{segments!r}")
    size = len(fns) // segments

    def run(start, end):
        def forward(x):
            for f in fns[start:end + 1]:
                x = f(x)
            return x
        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, len(fns) - 1)(input)
