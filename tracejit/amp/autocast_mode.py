"""`autocast`: PyTorch's mixed-precision context and decorator.

On the CPU it runs products and convolutions in bfloat16 (or float16) with float32
accumulation and losses in float32 (the lists: ops/autocast.py); parameters stay float32
and optimizers see float32 gradients, since the casts are differentiable. Under
`tracejit.compile`/`script` the state is part of each entry's guard: entering autocast
captures again, leaving it takes the float32 entry back.
"""
from __future__ import annotations

import functools
import warnings

from ..errors import user_stacklevel
from .. import dtypes as _dt
from ..ops import autocast as _state

__all__ = ["autocast", "custom_fwd", "custom_bwd", "is_autocast_available", "is_autocast_enabled",
           "get_autocast_dtype", "is_autocast_cache_enabled", "set_autocast_cache_enabled", "clear_autocast_cache"]

_CPU_DTYPES = ("bfloat16", "float16")


def is_autocast_available(device_type: str) -> bool:
    """True for the CPU; CUDA autocast is not supported yet."""
    return device_type == "cpu"


def is_autocast_enabled(device_type: str = "cpu") -> bool:
    return device_type == "cpu" and _state.current() is not None


def get_autocast_dtype(device_type: str = "cpu"):
    return _state.current() or _dt.bfloat16


def is_autocast_cache_enabled() -> bool:
    """Whether this thread's autocast keeps the weights' casts (ops/autocast.py); a context
    opened with ``cache_enabled=None`` takes this value, as PyTorch's does."""
    return _state.STATE.cache_on


def set_autocast_cache_enabled(enabled: bool) -> None:
    """Turn this thread's autocast weight cache on or off (the innermost context restores
    the previous value on exit)."""
    _state.STATE.cache_on = bool(enabled)


def clear_autocast_cache() -> None:
    """Drop this thread's cached weight casts, those kept across contexts included
    (leaving the outermost context drops the context's own)."""
    _state.STATE.casts = None
    _state.STATE.kept = None


class autocast:  # noqa: N801  (PyTorch's name)
    """``with autocast("cpu", dtype=tracejit.bfloat16, enabled=True):``, or ``@autocast(...)``.

    Disabled (``enabled=False``, or CUDA asked for where no GPU is, which PyTorch disables
    with a warning) it does nothing. Nested contexts restore the outer state on exit;
    ``cache_enabled=None`` takes the state in force when the context is made."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"autocast: expected device_type to be a string, got {type(device_type).__name__}")
        self.device = device_type
        self._enabled = bool(enabled)
        if device_type == "cuda" and self._enabled:
            from .. import cuda
            if not cuda.is_available():
                warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling",
                              UserWarning, stacklevel=user_stacklevel())
                self._enabled = False
            else:
                raise NotImplementedError("autocast: mixed precision on CUDA is not supported yet; "
                                          "use autocast('cpu', ...) or enabled=False")
        elif device_type != "cpu" and self._enabled:
            raise ValueError(f"autocast: unsupported device_type {device_type!r} (expected 'cpu' or 'cuda')")
        fast = _dt.bfloat16 if dtype is None else _dt.as_dtype(dtype)
        if self._enabled and fast.name not in _CPU_DTYPES:
            warnings.warn(f"In CPU autocast, but the target dtype is not supported ({fast.name}; supported: "
                          f"{', '.join(_CPU_DTYPES)}). Disabling autocast.", UserWarning, stacklevel=user_stacklevel())
            self._enabled = False
        self.fast_dtype = fast
        self._cache = _state.STATE.cache_on if cache_enabled is None else bool(cache_enabled)
        self._prev = []

    def __enter__(self):
        self._prev.append(_state.enter(self.fast_dtype if self._enabled else None, self._cache))
        with _LOCK:
            _state.ENTERED[0] += 1
        return self

    def __exit__(self, *exc) -> bool:
        _state.leave(self._prev.pop())
        with _LOCK:
            _state.ENTERED[0] -= 1
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


import threading  # noqa: E402
_LOCK = threading.Lock()


def custom_fwd(fwd=None, *, device_type: str = "cuda", cast_inputs=None):
    """Decorator for a custom Function's forward: with `cast_inputs`, floating tensor
    arguments are cast to it and the forward runs with autocast off (as PyTorch's)."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    if cast_inputs is None:
        return fwd

    @functools.wraps(fwd)
    def wrapped(*args, **kwargs):
        if _state.current() is None:
            return fwd(*args, **kwargs)
        dt = _dt.as_dtype(cast_inputs)
        args, kwargs = _state._cast_args(args, kwargs, lambda t: t if t.dtype is dt else _state._cast(t, dt))
        with autocast(device_type, enabled=False):
            return fwd(*args, **kwargs)
    return wrapped


def custom_bwd(bwd=None, *, device_type: str = "cuda"):
    """Decorator for a custom Function's backward under autocast: the backward unchanged."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
