"""Grad mode: whether ops record the autograd graph (thread-local, like PyTorch)."""
from __future__ import annotations

import functools
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode"]


class _State(threading.local):
    enabled = True


_state = _State()


def is_grad_enabled() -> bool:
    return _state.enabled


class _GradModeContext:
    """Base for the grad-mode switches: usable as a context manager or a decorator."""

    _mode: bool

    def __enter__(self):
        self._prev = _state.enabled
        _state.enabled = self._mode
        return self

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = _state.enabled
            _state.enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                _state.enabled = prev
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
        _state.enabled = mode

    def __call__(self, fn):
        # Used as a decorator: the switch made by __init__ must not leak out.
        _state.enabled = self._prev
        return super().__call__(fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False
