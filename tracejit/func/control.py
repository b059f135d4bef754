"""``tracejit.cond``: PyTorch's ``torch.cond(pred, true_fn, false_fn, operands)``."""
from __future__ import annotations

from typing import Any, Callable

from ..tensor import Tensor

__all__ = ["cond"]


def cond(pred, true_fn: Callable, false_fn: Callable, operands=()) -> Any:
    """``true_fn(*operands)`` if `pred` else ``false_fn(*operands)``. `pred` is a bool or a
    one-element tensor; a compiled function whose `pred` is a tensor it computed captures
    both branches as graph control flow (`jit.control.trace_cond`)."""
    if not isinstance(operands, (tuple, list)):
        raise RuntimeError(f"cond: operands must be a tuple or list, got {type(operands).__name__}")
    if isinstance(pred, Tensor):
        if pred.numel() != 1:
            raise RuntimeError(f"cond: pred must be a bool or a one-element tensor, got a tensor of "
                               f"shape {tuple(pred.shape)}")
        from ..jit.control import is_traced, trace_cond
        if is_traced(pred):   # (trace_cond returns a tuple: give back what the branches return)
            tupled: list = []

            def branch(fn):
                return lambda *a: (r if tupled.append(isinstance(r := fn(*a), tuple)) or tupled[-1] else (r,))
            out = trace_cond(pred, branch(true_fn), branch(false_fn), tuple(operands))
            return out if tupled[0] else out[0]
        pred = bool(pred.item())
    elif not isinstance(pred, (bool, int)):
        raise RuntimeError(f"cond: pred must be a bool or a one-element tensor, got {type(pred).__name__}")
    return (true_fn if pred else false_fn)(*operands)
