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
import os
import threading

__all__ = ["eager", "is_eager", "check_enabled", "log", "configure_logging", "TOPICS"]

TOPICS = ("recompiles", "graphs", "guards", "kernels", "cache", "fallback")

log = logging.getLogger("tracejit")


class _State(threading.local):
    eager_depth = 0


_state = _State()


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def is_eager() -> bool:
    return _state.eager_depth > 0 or _env_flag("TRACEJIT_DISABLE")


def check_enabled() -> bool:
    return _env_flag("TRACEJIT_CHECK")


@contextlib.contextmanager
def eager():
    """Run every tracejit-decorated function as plain Python inside this block."""
    _state.eager_depth += 1
    try:
        yield
    finally:
        _state.eager_depth -= 1


def configure_logging(spec: str | None = None) -> None:
    """Enable topics from a comma-separated spec (default: ``$TRACEJIT_LOG``)."""
    spec = os.environ.get("TRACEJIT_LOG", "") if spec is None else spec
    topics = [t.strip() for t in spec.split(",") if t.strip()]
    if not topics:
        return
    if "all" in topics:
        topics = list(TOPICS)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[tracejit.%(topic)s] %(message)s"))
    handler.addFilter(_TopicFilter())
    for t in topics:
        if t not in TOPICS:
            log.warning("TRACEJIT_LOG: unknown topic %r (known: %s)", t, ", ".join(TOPICS))
            continue
        lg = logging.getLogger(f"tracejit.{t}")
        lg.setLevel(logging.DEBUG)
        if not any(isinstance(h, logging.StreamHandler) for h in lg.handlers):
            lg.addHandler(handler)
        lg.propagate = False


class _TopicFilter(logging.Filter):
    def filter(self, record):
        record.topic = record.name.rsplit(".", 1)[-1]
        return True


def topic(name: str) -> logging.Logger:
    return logging.getLogger(f"tracejit.{name}")
