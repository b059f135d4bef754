"""``tracejit.cond``: PyTorch's ``torch.cond(pred, true_fn, false_fn, operands)``."""
from __future__ import annotations

from typing import Any, Callable

from ..tensor import Tensor

__all__ = ["cond"]


def cond(pred, true_fn: Callable, false_fn: Callable, operands=()) -> Any:
    """``true_fn(*operands)`` if `pred` else ``false_fn(*operands)``. `pred` is a bool or a
    one-element tensor; a compiled function guards on its value (a recompile per branch
    taken) rather than tracing both branches."""
    if isinstance(pred, Tensor):
        if pred.numel() != 1:
            raise RuntimeError(f"cond: pred must be a bool or a one-element tensor, got a tensor of "
                               f"shape {tuple(pred.shape)}")
        pred = bool(pred.item())
    elif not isinstance(pred, (bool, int)):
        raise RuntimeError(f"cond: pred must be a bool or a one-element tensor, got {type(pred).__name__}")
    if not isinstance(operands, (tuple, list)):
        raise RuntimeError(f"cond: operands must be a tuple or list, got {type(operands).__name__}")
    return (true_fn if pred else false_fn)(*operands)
