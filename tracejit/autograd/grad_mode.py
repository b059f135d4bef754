"""Grad mode: whether ops record the autograd graph (thread-local, like PyTorch)."""
from __future__ import annotations

import functools
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode"]


class _State(threading.local):
    enabled = True


_state = _State()

# How many threads have grad mode off right now. While none has, the per-op checks
# (ops/registry.py: ``not OFF[0] or _state.enabled``) know grad mode is on without
# reading the thread-local (~50 ns a read, a list item ~10). Every switch goes through
# `set_mode`; a thread that ends with grad mode off leaves the count up, which only
# sends the checks to the thread-local again.
OFF = [0]
_off_lock = threading.Lock()


def set_mode(mode) -> None:
    """Set this thread's grad mode (every writer of ``_state.enabled`` calls this)."""
    mode = bool(mode)
    if mode is not _state.enabled:
        with _off_lock:
            OFF[0] += -1 if mode else 1
    _state.enabled = mode


def is_grad_enabled() -> bool:
    return _state.enabled


class _GradModeContext:
    """Base for the grad-mode switches: usable as a context manager or a decorator."""

    _mode: bool

    def __enter__(self):
        self._prev = _state.enabled
        set_mode(self._mode)
        return self

    def __exit__(self, *exc):
        set_mode(self._prev)
        return False

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = _state.enabled
            set_mode(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                set_mode(prev)
        return wrapper


class _NoParamDecorator(_GradModeContext):
    """Also usable bare: ``@no_grad`` as well as ``@no_grad()``."""

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if fn is not None and callable(fn):
            return self(fn)
        return self

    def __init__(self, fn=None):
        pass


class no_grad(_NoParamDecorator):
    """Disable gradient recording: ``with no_grad(): ...``, ``@no_grad()`` or ``@no_grad``."""
    _mode = False


class enable_grad(_NoParamDecorator):
    """Enable gradient recording inside a no_grad region."""
    _mode = True


class inference_mode(_GradModeContext):
    """Alias of no_grad (tracejit has no separate inference tensors)."""
    _mode = False

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        if callable(mode):  # bare @inference_mode
            self._mode = False
            return self(mode)
        return self

    def __init__(self, mode: bool = True):
        if not callable(mode):
            self._mode = not mode


class set_grad_enabled(_GradModeContext):
    """``set_grad_enabled(False)`` switches immediately; as a context it restores on exit."""

    def __init__(self, mode: bool):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {type(mode).__name__}")
        self._prev = _state.enabled
        self._mode = mode
        set_mode(mode)

    def __call__(self, fn):
        # Used as a decorator: the switch made by __init__ must not leak out.
        set_mode(self._prev)
        return super().__call__(fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        set_mode(self._prev)
        return False
