"""``tracejit.cpu``: the CPU device module PyTorch programs address like ``torch.cuda``
(``torch.cpu.is_available()``, ``torch.cpu.amp.autocast``)."""
from __future__ import annotations

from . import amp as _amp

__all__ = ["is_available", "device_count", "current_device", "synchronize", "amp"]


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """Nothing to wait for: CPU ops have finished when they return."""


amp = _amp.device_module("cpu")
__path__: list = []   # (a package to the import system, so ``import torch.cpu.amp`` finds amp)
