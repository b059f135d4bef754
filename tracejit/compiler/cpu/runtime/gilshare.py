"""A shorter GIL switch interval while a background thread of ours runs Python.

Why: a warm process's background work (planning, kernel loads) shares the GIL with the
user's steps, and after each numpy call that releases the GIL the step waits up to the
switch interval (5 ms) to get it back (Transformer step under load: 603-706 ms of waiting
at 5 ms, 464-469 at 0.5 ms).

`shorter_switches()` sets the interval to `SWITCH_S` while any such block runs and puts
the previous value back after the last one, unless someone else changed it meanwhile.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterator, Optional

__all__ = ["SWITCH_S", "shorter_switches"]

SWITCH_S = 0.0005
_lock = threading.Lock()
_users = 0
_saved: Optional[float] = None   # the interval to put back, None when we did not change it


@contextlib.contextmanager
def shorter_switches() -> Iterator[None]:
    """Within the block, the GIL switch interval is at most `SWITCH_S`."""
    global _users, _saved
    with _lock:
        if _users == 0:
            current = sys.getswitchinterval()
            _saved = current if current > SWITCH_S else None
            if _saved is not None:
                sys.setswitchinterval(SWITCH_S)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            if _users > 0:   # (0: a block entered before a fork, ending in the child)
                _users -= 1
                if _users == 0:
                    _restore()


def _restore() -> None:
    global _saved
    if _saved is not None and abs(sys.getswitchinterval() - SWITCH_S) < 1e-9:
        sys.setswitchinterval(_saved)   # (a value someone else set meanwhile stays)
    _saved = None


def _after_fork_in_child() -> None:
    # The blocks running in the parent's other threads do not exist here: none runs.
    global _users, _lock
    _lock = threading.Lock()
    _users = 0
    _restore()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
