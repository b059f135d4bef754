"""A shorter GIL switch interval while a background thread of ours runs Python.

Why: a warm process's background work (planning, numba's import, kernel loads: 0.3-0.7 s
of Python in one thread for the Transformer step) shares the GIL with the user's training
steps. The caller gives the GIL up at every numpy or BLAS call that releases it, and on
its return it waits for the background thread to hand the GIL back, which CPython asks
for only after the switch interval (5 ms by default): a step making hundreds of such
calls waits up to the interval each time. Measured on the Transformer step of a warm
process (2 shared cores, load 7-8; the main thread's time neither running nor waiting for
a core, /proc/<tid>/schedstat, steps 2-10 summed): 603-706 ms with 5 ms, 464-469 ms with
0.5 ms.

`shorter_switches()` sets the interval to `SWITCH_S` for as long as one such block runs
(nested and concurrent blocks count), and puts the previous value back after the last
one unless someone else changed it meanwhile; an interval already at or below `SWITCH_S`
is left alone. It only changes anything while two threads want the GIL.
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
