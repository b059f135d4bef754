"""Grad mode: whether ops record the autograd graph (thread-local, like PyTorch)."""
from __future__ import annotations

import functools
import inspect
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode",
           "is_inference_mode_enabled", "enforce_grad_layout_policy"]


class _State(threading.local):
    enabled = True     # whether ops record a graph (never inside inference_mode)
    inference = False
    # the grad mode user code last set inside inference_mode (is_grad_enabled's answer
    # there, as PyTorch's: enable_grad turns it on, yet nothing records); outside, `enabled`
    asked = False
    layout_policy = True
    # the nodes this thread's ``autograd.grad(..., create_graph=True)`` walk needs (None:
    # every node), for a node that leaves out gradients nothing reads (`CompiledNode`)
    needed = None


_state = _State()

# One entry per thread that has grad mode off right now. While it is empty, the per-op
# checks (``not OFF or _state.enabled``) know grad mode is on without reading the
# thread-local (~50 ns a read, a list's truth ~10). `set_mode` appends or pops one entry,
# an atomic list operation, so no lock is needed.
OFF: list = []


def set_mode(mode) -> None:
    """Set this thread's grad mode (every writer of ``_state.enabled`` calls this); inside
    ``inference_mode`` recording stays off, as nothing records a graph there."""
    if _state.inference:
        _state.asked = bool(mode)
        mode = False
    else:
        mode = bool(mode)
    if mode is not _state.enabled:
        if mode:
            OFF.pop()
        else:
            OFF.append(None)
    _state.enabled = mode


def is_grad_enabled() -> bool:
    """Whether ops record the autograd graph (tracejit's own checks ask this)."""
    return _state.enabled


def grad_mode_enabled() -> bool:
    """PyTorch's ``is_grad_enabled()``: the grad mode set last, which inside
    ``inference_mode`` may be on (``enable_grad``) while nothing records."""
    return _state.asked if _state.inference else _state.enabled


class _GradModeContext:
    """Base for the grad-mode switches: usable as a context manager or a decorator."""

    _mode: bool

    # (`set_mode` written out in both: a ``with no_grad():`` around a training step's
    # update cost ~1.7 us, a third of it the two calls)
    def __enter__(self):
        prev = self._prev = _state.enabled
        if _state.inference:   # (recording stays off: prev is False; None says restore `asked`)
            self._prev, self._asked = None, _state.asked
            _state.asked = bool(self._mode)
            mode = False
        else:
            mode = bool(self._mode)
        if mode is not prev:
            if mode:
                OFF.pop()
            else:
                OFF.append(None)
        _state.enabled = mode
        return self

    def __exit__(self, exc_type, exc, tb):
        mode = self._prev
        if mode is None:
            mode, _state.asked = False, self._asked
        if mode is not _state.enabled:
            if mode:
                OFF.pop()
            else:
                OFF.append(None)
        _state.enabled = mode
        return False

    def __call__(self, fn):
        mode = self._mode
        if inspect.isgeneratorfunction(fn):
            return _generator_in(lambda: _Switch(mode), fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = _state.asked if _state.inference else _state.enabled
            set_mode(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                set_mode(prev)
        return wrapper


class _Switch(_GradModeContext):
    """Grad mode `mode` for the span of a ``with``."""

    def __init__(self, mode: bool):
        self._mode = mode


def _generator_in(context, fn):
    """Generator function `fn` decorated with a grad mode: the mode holds while its body
    runs (each resumption, its close and what is thrown in), not while the caller holds
    a value it yielded, as PyTorch's decorators do."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with context():
                sent = gen.send(None)
            while True:
                try:
                    got = yield sent
                except GeneratorExit:
                    with context():
                        gen.close()
                    raise
                except BaseException as e:   # (thrown in by the caller: into the body)
                    with context():
                        sent = gen.throw(e)
                else:
                    with context():
                        sent = gen.send(got)
        except StopIteration as stop:
            return stop.value
    return wrapper


class _NoParamDecorator(_GradModeContext):
    """Also usable bare: ``@no_grad`` as well as ``@no_grad()``."""

    def __new__(cls, fn=None):
        self = object.__new__(cls)
        if fn is not None and callable(fn):
            return self(fn)
        return self

    # (no __init__: object's takes the `fn` __new__ took, without a Python call)


class no_grad(_NoParamDecorator):
    """Disable gradient recording: ``with no_grad(): ...``, ``@no_grad()`` or ``@no_grad``."""
    _mode = False


class enable_grad(_NoParamDecorator):
    """Enable gradient recording inside a no_grad region."""
    _mode = True


def is_inference_mode_enabled() -> bool:
    """Whether this thread is inside ``inference_mode()`` (and not a nested
    ``inference_mode(False)``)."""
    return _state.inference


def _count_inference(was: bool, now: bool) -> None:
    """Keep tensor.py's count of threads inside inference_mode (tensors made there are
    inference tensors) as this thread goes in or out."""
    if was is not now:
        from ..tensor import _INFERENCE
        if now:
            _INFERENCE.append(None)
        else:
            _INFERENCE.pop()


class inference_mode(_GradModeContext):
    """no_grad that also reports itself through ``is_inference_mode_enabled``, whose
    tensors are inference tensors (``is_inference()``; autograd outside refuses to save
    them, in-place updates outside refuse them), and that ``enable_grad`` inside does not undo:
    ``is_grad_enabled()`` says on there, as PyTorch's, yet nothing records;
    ``inference_mode(False)`` turns both off."""
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

    def __enter__(self):
        # PyTorch's InferenceMode(on) sets grad mode to `not on`, restored on exit with the rest
        self._prev_inference, self._prev_asked = _state.inference, grad_mode_enabled()
        _count_inference(_state.inference, not self._mode)
        _state.inference = not self._mode
        _state.asked = self._mode
        prev = self._prev = _state.enabled
        if self._mode is not prev:
            if self._mode:
                OFF.pop()
            else:
                OFF.append(None)
        _state.enabled = self._mode
        return self

    def __exit__(self, exc_type, exc, tb):
        _count_inference(_state.inference, self._prev_inference)
        _state.inference = self._prev_inference
        _state.asked = self._prev_asked
        return super().__exit__(exc_type, exc, tb)

    def __call__(self, fn):
        enabled = not self._mode
        if inspect.isgeneratorfunction(fn):
            return _generator_in(lambda: inference_mode(enabled), fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(enabled):
                return fn(*args, **kwargs)
        return wrapper


class set_grad_enabled(_GradModeContext):
    """``set_grad_enabled(False)`` switches immediately; as a context it restores on exit."""

    def __init__(self, mode: bool):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {type(mode).__name__}")
        self._prev = grad_mode_enabled()
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


class enforce_grad_layout_policy:  # noqa: N801  (PyTorch's name)
    """Whether accumulated gradients must take their parameter's strides (thread-local;
    ``enable=False`` lets the engine keep an incoming gradient's own layout). Switches
    when made; as a context it restores the previous setting on exit. Here gradients are
    always made in their parameter's layout, which both settings allow."""

    def __init__(self, enable: bool = True):
        if not isinstance(enable, bool):
            raise TypeError(f"enforce_grad_layout_policy expects a bool, got {type(enable).__name__}")
        self._prev = _state.layout_policy
        _state.layout_policy = enable

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.layout_policy = self._prev
        return False
