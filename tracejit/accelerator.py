"""``tracejit.accelerator``: PyTorch's device-agnostic accelerator questions.

PyTorch's examples start with ``torch.accelerator.current_accelerator().type if
torch.accelerator.is_available() else "cpu"``. tracejit's only accelerator is CUDA
through cupy, so the answers come from `tracejit.cuda` (which never raises on a
machine without cupy or a GPU).
"""
from __future__ import annotations

from typing import Optional

from . import cuda as _cuda
from .device import device as _device

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index",
           "set_device_index", "synchronize"]


def is_available() -> bool:
    """True when a CUDA GPU is usable (cupy imports and sees one)."""
    return _cuda.is_available()


def current_accelerator(check_available: bool = False) -> Optional[_device]:
    """``device('cuda')`` when a GPU is usable, else None (the CPU is not an accelerator)."""
    return _device("cuda") if _cuda.is_available() else None


def device_count() -> int:
    """Number of accelerator devices (0 without cupy or a GPU)."""
    return _cuda.device_count()


def current_device_index() -> int:
    """Index of the current GPU (-1 when there is none, as PyTorch answers)."""
    return _cuda.current_device() if _cuda.is_available() else -1


def set_device_index(device) -> None:
    """Make `device` (an index, 'cuda:N' or a device) cupy's current GPU."""
    from .device import cupy_module
    cp = cupy_module()
    cp.cuda.Device(_cuda._index(device)).use()


def synchronize(device=None) -> None:
    """Wait for queued GPU work; nothing to wait for without a GPU."""
    if _cuda.is_available():
        _cuda.synchronize(device)
