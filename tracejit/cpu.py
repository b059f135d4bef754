"""``tracejit.cpu``: the CPU device module PyTorch programs address like ``torch.cuda``
(``torch.cpu.is_available()``, ``torch.cpu.amp.autocast``)."""
from __future__ import annotations

import types

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


amp = types.ModuleType("tracejit.cpu.amp", "tracejit.cpu.amp: autocast and GradScaler (tracejit.amp).")
amp.autocast = lambda dtype=None, enabled=True, cache_enabled=None: _amp.autocast(  # noqa: E731
    "cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
amp.GradScaler = _amp.GradScaler
