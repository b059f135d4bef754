"""``torch.overrides``: tracejit dispatches no ``__torch_function__``, so no argument ever
has a torch function to run; library code that checks first (``if
has_torch_function(args): return handle_torch_function(...)``) takes its plain path."""
from __future__ import annotations

from typing import Any, Iterable

__all__ = ["handle_torch_function", "has_torch_function", "has_torch_function_unary",
           "has_torch_function_variadic", "is_tensor_like"]


def has_torch_function(relevant_args: Iterable) -> bool:
    return False


def has_torch_function_unary(arg: Any) -> bool:
    return False


def has_torch_function_variadic(*args: Any) -> bool:
    return False


def handle_torch_function(public_api, relevant_args, *args, **kwargs):
    raise NotImplementedError(f"handle_torch_function({getattr(public_api, '__name__', public_api)}): tracejit "
                              "dispatches no __torch_function__ (has_torch_function is always False)")


def is_tensor_like(inp: Any) -> bool:
    from .tensor import Tensor
    return isinstance(inp, Tensor) or hasattr(type(inp), "__torch_function__")
