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

from ..envflags import FALSE as _FALSE

__all__ = ["eager", "is_eager", "check_enabled", "log", "configure_logging", "TOPICS"]

TOPICS = ("recompiles", "graphs", "guards", "kernels", "cache", "fallback", "compile")

log = logging.getLogger("tracejit")


class _State(threading.local):
    eager_depth = 0


_state = _State()


# Flags are read on every call of a compiled function (so a test or a notebook can flip
# them at any time). ``os.environ.get`` costs microseconds; the mapping behind it is a
# plain dict, so look there when it is available.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENCODE = getattr(os.environ, "encodekey", None)


def _env_flag(name: str) -> bool:
    if _ENV_DATA is not None and _ENCODE is not None:
        raw = _ENV_DATA.get(_KEYS.get(name) or _key(name))
        if raw is None:
            return False
        value = raw.decode() if isinstance(raw, bytes) else raw
    else:
        value = os.environ.get(name, "")
    return value.strip().lower() not in _FALSE


_KEYS: dict = {}


def _key(name: str):
    k = _KEYS[name] = _ENCODE(name)
    return k


_K_DISABLE = _key("TRACEJIT_DISABLE") if _ENCODE is not None else None
_K_CHECK = _key("TRACEJIT_CHECK") if _ENCODE is not None else None


def plain_call() -> bool:
    """True when nothing unusual is on: no eager block or env flag, no check mode.

    The one test on the hot path of every compiled call, so it is written out flat.
    """
    if _state.eager_depth:
        return False
    data = _ENV_DATA
    if data is not None and _ENCODE is not None:
        if data.get(_K_DISABLE) is None and data.get(_K_CHECK) is None:
            return True
    return not (_env_flag("TRACEJIT_DISABLE") or _env_flag("TRACEJIT_CHECK"))


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
    """Enable topics from a comma-separated spec (default: ``$TRACEJIT_LOG``).

    Each topic's logger (``tracejit.<topic>``) is set to DEBUG. If the application has
    configured logging (the root logger has handlers), records propagate to its handlers
    (and to pytest's ``caplog``); otherwise tracejit prints them to stderr itself.
    """
    spec = os.environ.get("TRACEJIT_LOG", "") if spec is None else spec
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
