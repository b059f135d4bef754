"""Shared fixtures for the JIT front-end tests.

Most tests pass ``compiler="interpret"``: they test capture, IR, guards and cache, and
the reference interpreter makes them independent of the numba backend (and fast). The
`compiler` fixture runs a test on both: the interpreter and the default backend (the
numba compiler when it is importable, the interpreter before that).
"""
from __future__ import annotations

import logging

import pytest

from tracejit.jit import config


@pytest.fixture(params=["interpret", "default"])
def compiler(request):
    """A value for the ``compiler=`` argument of trace/script."""
    return "interpret" if request.param == "interpret" else "numba"


@pytest.fixture(autouse=True)
def _clean_jit_env(monkeypatch):
    """No test inherits eager/check mode or logging topics from the environment."""
    for name in ("TRACEJIT_DISABLE", "TRACEJIT_CHECK", "TRACEJIT_LOG"):
        monkeypatch.delenv(name, raising=False)
    yield
    for t in config.TOPICS:
        lg = logging.getLogger(f"tracejit.{t}")
        lg.setLevel(logging.NOTSET)
        lg.propagate = True
        for h in [h for h in lg.handlers if getattr(h, "_tracejit", False)]:
            lg.removeHandler(h)
