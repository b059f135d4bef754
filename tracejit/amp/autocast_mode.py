"""`autocast`: PyTorch's mixed-precision context, disabled-only for now (see the package)."""
from __future__ import annotations

import functools
import warnings

__all__ = ["autocast", "custom_fwd", "custom_bwd", "is_autocast_available"]


def is_autocast_available(device_type: str) -> bool:
    """False: tracejit has no mixed-precision autocast yet."""
    return False


class autocast:  # noqa: N801  (PyTorch's name)
    """``with autocast(device_type, dtype=None, enabled=True, cache_enabled=None):``.

    Disabled (``enabled=False``, or CUDA asked for where no GPU is, which PyTorch disables
    with a warning) it does nothing. Enabled it raises NotImplementedError: tracejit does
    not run ops in bfloat16/float16 under autocast yet."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"autocast: expected device_type to be a string, got {type(device_type).__name__}")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        if self._enabled and device_type == "cuda":
            from .. import cuda
            if not cuda.is_available():
                warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling",
                              UserWarning, stacklevel=2)
                self._enabled = False
        if self._enabled:
            kind = getattr(dtype, "name", None) or ("bfloat16" if device_type == "cpu" else "float16")
            raise NotImplementedError(
                f"autocast: mixed precision ({kind} on {device_type}) is not supported yet; run in "
                f"float32 with autocast(..., enabled=False) (the ops already run in float32)")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


def custom_fwd(fwd=None, *, device_type: str = "cuda", cast_inputs=None):
    """Decorator for a custom Function's forward under autocast: the forward unchanged."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    return fwd


def custom_bwd(bwd=None, *, device_type: str = "cuda"):
    """Decorator for a custom Function's backward under autocast: the backward unchanged."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
