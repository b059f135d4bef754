"""``tracejit.autograd.graph``: the autograd graph's node type and the helpers PyTorch
keeps at ``torch.autograd.graph`` that need no saved-tensor hooks: ``Node`` (every
``grad_fn`` is one), ``increment_version``, and the context managers ``save_on_cpu``
(tensors here are saved where they live; on the CPU that is where PyTorch's puts them) and
``disable_saved_tensors_hooks``."""
from __future__ import annotations

import contextlib

from ..tensor import Tensor
from .node import AccumulateGrad, Node

__all__ = ["Node", "increment_version", "save_on_cpu", "disable_saved_tensors_hooks"]


def increment_version(tensor) -> None:
    """Bump `tensor`'s version counter (or each of an iterable's), as an in-place write
    does: a backward that saved it then refuses to use the old value."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"increment_version: expected a tensor, got {type(t).__name__}")
        t._vbox[0] += 1


class save_on_cpu(contextlib.nullcontext):  # noqa: N801  (PyTorch's name)
    """Tensors the graph saves inside the block are kept in host memory: on the CPU they
    already are, so the block changes nothing."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        super().__init__()
        self.pin_memory, self.device_type = pin_memory, device_type


class disable_saved_tensors_hooks(contextlib.nullcontext):  # noqa: N801
    """A block in which saved-tensor hooks may not be registered; none are, here."""

    def __init__(self, error_message: str):
        super().__init__()
        self.error_message = error_message


def reachable_leaves(outs) -> set:
    """ids of the leaf tensors whose gradient the graphs of `outs` (tensors; anything else
    is skipped) reach."""
    seen, used = set(), set()
    stack = [x.grad_fn for x in outs if isinstance(x, Tensor) and x.grad_fn is not None]
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, AccumulateGrad):
            t = n.variable()
            if t is not None:
                used.add(id(t))
        stack.extend(n._next)
    return used
