"""Activation checkpointing, as ``torch.utils.checkpoint``: ``checkpoint(fn, *args)`` and
``checkpoint_sequential(functions, segments, input)``.

With ``use_reentrant=True`` the function runs without recording a graph; its inputs are
kept and, in the backward pass, it runs again with the random-number state it first saw
and is differentiated then, so the activations inside it are not held between the passes.
As in PyTorch, that form needs an input that requires grad to record anything, and
accumulates into the parameters it reaches (``backward()``, not ``autograd.grad``).
``use_reentrant=False`` (PyTorch's recommendation) runs the function as it is: the same
numbers and gradients everywhere, ``autograd.grad`` and compiled steps included (a compiled
step plans its own memory), without freeing the activations in eager mode.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

from ..autograd.function import Function
from ..errors import user_stacklevel
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..ops import random as _random
from ..ops import registry as _reg
from ..tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential"]


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
        args = []
        for a in ctx.args:
            if isinstance(a, Tensor):
                t = next(saved).detach()
                t.requires_grad = a.requires_grad
                args.append(t)
            else:
                args.append(a)
        now = _random.get_rng_state()
        try:
            if ctx.rng is not None:
                _random.set_rng_state(ctx.rng)
            with enable_grad():
                out = ctx.fn(*args)
        finally:
            _random.set_rng_state(now)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if pairs:
            _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) and a.requires_grad else None
                                    for a in args)


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
    if not use_reentrant or tracing or not is_grad_enabled():
        return function(*args, **kwargs)
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
