"""Switches users debug with: eager mode, check mode, logging topics.

- ``TRACEJIT_DISABLE=1`` or ``with tracejit.eager():`` runs decorated functions as plain
  Python (print and breakpoints work inside them).
- ``TRACEJIT_CHECK=1`` runs compiled and eager side by side and compares.
- ``TRACEJIT_LOG=recompiles,graphs,guards`` turns logging topics on (``tracejit.<topic>``
  loggers under Python's ``logging``).
"""
from __future__ import annotations

import contextlib
import logging
import threading

from .. import envflags as _env

__all__ = ["eager", "is_eager", "check_enabled", "log", "configure_logging", "TOPICS"]

TOPICS = ("recompiles", "graphs", "guards", "kernels", "cache", "fallback", "compile")

log = logging.getLogger("tracejit")


class _State(threading.local):
    eager_depth = 0


_state = _State()
_debug_switch_set = _env.any_set("TRACEJIT_DISABLE", "TRACEJIT_CHECK")


def plain_call() -> bool:
    """True when nothing unusual is on: no eager block or env flag, no check mode.

    The one test on the hot path of every compiled call: two dict lookups when the
    switches are unset (see envflags.any_set).
    """
    if _state.eager_depth:
        return False
    if not _debug_switch_set():
        return True
    return not (_env.enabled("TRACEJIT_DISABLE") or _env.enabled("TRACEJIT_CHECK"))


def is_eager() -> bool:
    return _state.eager_depth > 0 or _env.enabled("TRACEJIT_DISABLE")


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
