"""Switches users debug with: eager mode, check mode, logging topics.

- ``TRACEJIT_DISABLE=1`` or ``with tracejit.eager():`` runs decorated functions as plain
  Python (print and breakpoints work inside them).
- ``TRACEJIT_CHECK=1`` runs compiled and eager side by side and compares.
- ``TRACEJIT_LOG=recompiles,graphs,guards`` turns logging topics on (``tracejit.<topic>``
  loggers under Python's ``logging``).
- ``set_stance`` (``torch.compiler.set_stance``): process-wide, as torch's; ``"force_eager"``
  runs every compiled function eagerly, the others decide what a call that would capture
  does (run eagerly, raise, or run its first call eagerly).
"""
from __future__ import annotations

import contextlib
import logging
import threading

from .. import envflags as _env

__all__ = ["eager", "is_eager", "check_enabled", "log", "configure_logging", "TOPICS", "set_stance", "stance"]

TOPICS = ("recompiles", "graphs", "guards", "kernels", "cache", "fallback", "compile")

log = logging.getLogger("tracejit")


class _State(threading.local):
    eager_depth = 0


_state = _State()
_env_switch_set = _debug_switch_set = _env.any_set("TRACEJIT_DISABLE", "TRACEJIT_CHECK")
STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile", "eager_then_compile",
           "aot_eager_then_compile")
_stance = "default"


def plain_call() -> bool:
    """True when nothing unusual is on: no eager block or env flag, no check mode.

    The one test on the hot path of every compiled call: two dict lookups when the
    switches are unset (see envflags.any_set).
    """
    if _state.eager_depth:
        return False
    if not _debug_switch_set():
        return True
    return not (_stance == "force_eager" or _holds[0] or _env.enabled("TRACEJIT_DISABLE")
                or _env.enabled("TRACEJIT_CHECK"))


def is_eager() -> bool:
    return _state.eager_depth > 0 or _stance == "force_eager" or _holds[0] > 0 or _env.enabled("TRACEJIT_DISABLE")


_holds = [0]   # blocks, in any thread, that need every op recorded eagerly (saved-tensor hooks)
_holds_lock = threading.Lock()


def hold_eager(delta: int) -> None:
    """Enter (+1) or leave (-1) a block in which compiled functions run eagerly."""
    global _debug_switch_set
    with _holds_lock:   # (threads enter and leave hooks blocks at once: no lost count)
        _holds[0] += delta
        _debug_switch_set = (lambda: True) if _holds[0] or _stance == "force_eager" else _env_switch_set


def stance() -> str:
    """The compiler's stance now (`set_stance`'s name)."""
    return _stance


def _set(name: str) -> str:
    """Make `name` the stance; -> the one before."""
    global _stance
    from ..ops.registry import trace_state
    if trace_state.tracer is not None:
        raise RuntimeError("set_stance: attempted to set the stance inside a compiled region")
    prev, _stance = _stance, name
    hold_eager(0)   # (force_eager must reach the hot path's one test; the others act on a miss)
    return prev


def stance_declines(fn, reasons: list) -> bool:
    """Whether the stance runs a call of `fn` that would capture eagerly instead (raises
    under ``"fail_on_recompile"``, naming the function and why no entry matched)."""
    if _stance == "default":
        return False
    if _stance == "fail_on_recompile":
        why = "".join(f"\n    - {r}" for r in reasons)
        raise RuntimeError(f"Detected recompile when torch.compile stance is 'fail_on_recompile': "
                           f"function {fn.__name__!r}" + (f", because{why}" if why else " (its first capture)"))
    if _stance.endswith("_then_compile"):   # the first call of each function runs eagerly
        first = not fn._entries and not fn._stats.get("stance_eager_call")
        fn._stats["stance_eager_call"] = 1
        return first
    return _stance == "eager_on_recompile"


class set_stance:  # noqa: N801  (torch's name)
    """``torch.compiler.set_stance``: called, it sets the stance now; as ``with`` it sets
    it for the block; as a decorator, for each call of the function. `skip_guard_eval_unsafe`
    is accepted and changes nothing (guards are one generated check); `force_backend` is
    not supported (a backend is chosen when a function is compiled)."""

    def __init__(self, stance: str = "default", *, skip_guard_eval_unsafe: bool = False,
                 force_backend=None) -> None:
        if not isinstance(stance, str) or stance not in STANCES:
            raise ValueError(f"set_stance: unknown stance {stance!r}; choose one of "
                             f"{', '.join(map(repr, STANCES))}")
        if force_backend is not None:
            raise (RuntimeError("set_stance: a non-default stance cannot have force_backend set")
                   if stance != "default" else
                   NotImplementedError("set_stance: force_backend is not supported; pass backend= "
                                       "to tracejit.compile"))
        self.stance, self.skip_guard_eval_unsafe = stance, skip_guard_eval_unsafe
        self.prev = _set(stance)

    def __enter__(self) -> None:
        _set(self.stance)

    def __exit__(self, *exc) -> None:
        _set(self.prev)

    def __call__(self, fn):
        import functools
        _set(self.prev)   # (as a decorator it acts only while `fn` runs)

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            with self.__class__(self.stance, skip_guard_eval_unsafe=self.skip_guard_eval_unsafe):
                return fn(*args, **kwargs)
        return with_stance


def check_enabled() -> bool:
    return _env.enabled("TRACEJIT_CHECK")


@contextlib.contextmanager
def eager():
    """Run every tracejit-decorated function as plain Python inside this block."""
    _state.eager_depth += 1
    try:
        yield
    finally:
        _state.eager_depth -= 1


def configure_logging(spec: str | None = None) -> None:
    """Enable topics from a comma-separated spec (default: ``$TRACEJIT_LOG``).

    Each topic's logger (``tracejit.<topic>``) is set to DEBUG. If the application has
    configured logging (the root logger has handlers), records propagate to its handlers
    (and to pytest's ``caplog``); otherwise tracejit prints them to stderr itself.
    """
    spec = _env.value("TRACEJIT_LOG") if spec is None else spec
    topics = [t.strip() for t in spec.split(",") if t.strip()]
    if not topics:
        return
    if "all" in topics:
        topics = list(TOPICS)
    app_configured = bool(logging.getLogger().handlers)
    for t in topics:
        if t not in TOPICS:
            log.warning("TRACEJIT_LOG: unknown topic %r (known: %s)", t, ", ".join(TOPICS))
            continue
        lg = logging.getLogger(f"tracejit.{t}")
        lg.setLevel(logging.DEBUG)
        ours = [h for h in lg.handlers if getattr(h, "_tracejit", False)]
        if app_configured:
            for h in ours:
                lg.removeHandler(h)
            lg.propagate = True
        elif not ours:
            lg.addHandler(_HANDLER)
            lg.propagate = False


class _TopicFilter(logging.Filter):
    def filter(self, record):
        record.topic = record.name.rsplit(".", 1)[-1]
        return True


_HANDLER = logging.StreamHandler()
_HANDLER.setFormatter(logging.Formatter("[tracejit.%(topic)s] %(message)s"))
_HANDLER.addFilter(_TopicFilter())
_HANDLER._tracejit = True


def topic(name: str) -> logging.Logger:
    return logging.getLogger(f"tracejit.{name}")
