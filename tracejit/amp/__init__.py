"""``tracejit.amp``: automatic mixed precision, as ``torch.amp``.

`autocast` runs PyTorch's CPU op lists in bfloat16 (products and convolutions) and
float32 (losses) with float32 master weights (docs/guide/mixed-precision.md).
`GradScaler` scales the loss and unscales the gradients, skipping steps whose gradients
are not finite, as PyTorch's does; with float32 gradients it changes no result, and
``enabled=False`` makes every call a pass-through.
"""
from .autocast_mode import (autocast, clear_autocast_cache, custom_bwd, custom_fwd,  # noqa: F401
                            get_autocast_dtype, is_autocast_available, is_autocast_cache_enabled,
                            is_autocast_enabled, set_autocast_cache_enabled)
from .grad_scaler import GradScaler  # noqa: F401

import functools as _functools


def device_module(device: str):
    """``torch.cpu.amp`` / ``torch.cuda.amp`` (``from torch.cuda.amp import autocast,
    GradScaler``): autocast and the scaler on `device`, with those modules' signatures
    (``autocast(enabled=True, dtype=None, cache_enabled=None)``), importable by path."""
    from .._path_modules import path_module
    name = f"tracejit.{device}.amp"
    return path_module(name, f"``torch.{device}.amp``: `autocast` and `GradScaler` on {device}.", {
        "autocast": lambda enabled=True, dtype=None, cache_enabled=None: autocast(
            device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled),
        "GradScaler": _functools.partial(GradScaler, device),
        "custom_fwd": _functools.partial(custom_fwd, device_type=device),
        "custom_bwd": _functools.partial(custom_bwd, device_type=device)})


__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd", "is_autocast_available",
           "is_autocast_enabled", "get_autocast_dtype"]
