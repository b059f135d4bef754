"""What ``os.fork`` waits for, so that a forked child never inherits work half done by a
thread it does not have: the locks handed to `hold` (tiers' planning lock, the disk
cache's load lock) and every module import in progress in another thread.

Why imports: a forked child has only the forking thread, and a module that another thread
was importing at the fork stays "being imported" for good there, its import lock owned by
a thread that no longer exists: the child's first import of it waits forever.

Why one hook, registered once and early (by the package's import, before any background
thread exists), that reads its list of locks at each fork: os.fork calls the before-hooks
registered when the fork began, but the after-hooks registered by its end, so hooks
registered by a thread during a fork release locks they never acquired.

Why it also holds CPython's import lock (`_imp.acquire_lock`, which importlib takes to hand
out a module's lock) from its last look at the imports to the fork: otherwise a thread
inside importlib's own code at that look can take its module's lock while os.fork waits,
and be inside the import at the fork. Holding it, no thread starts an import, and the
look and the fork see the same state: CPython's fork keeps the import lock held by the
forking thread in the child, and the after-hooks release it.
"""
from __future__ import annotations

import _imp
import os
import threading
import time

__all__ = ["hold"]

# How long a fork waits for other threads' imports before it goes on regardless (an import
# waiting for a lock the forking thread holds, or a module whose body never returns, would
# hold it for good): numba's import takes 0.3-0.5 s on a quiet machine, a few s on a busy one
# (and the planning thread imports it under `_planning`, which the fork waits for anyway).
IMPORT_WAIT_S = 10.0
# Rounds of (imports done, locks taken): an import that began while we waited for a lock
# may need that lock; we let go and wait for it.
_ROUNDS = 20

_locks: list = []    # [(rank, sequence, lock)], fork order: lowest rank first
_held: list = []     # the locks the running fork took (released after it, in reverse)
_imp_held = False    # and CPython's import lock


def hold(lock, rank: int) -> None:
    """Have every ``os.fork`` wait for `lock` (acquire it) and release it after, in parent
    and child alike. `rank` orders the locks (outer ones lowest: a thread holding lock A
    that may wait for lock B needs rank(A) < rank(B))."""
    _locks.append((rank, len(_locks), lock))


def _importing() -> bool:
    """Whether another thread is inside a module's import (owns its import lock, or is in
    the middle of taking or giving it back)."""
    try:
        from importlib import _bootstrap
        refs = list(_bootstrap._module_locks.values())
    except (ImportError, AttributeError, RuntimeError):
        return False
    me = threading.get_ident()
    for ref in refs:
        lock = ref()
        owner = getattr(lock, "owner", None)
        if owner is not None and owner != me and getattr(lock, "count", 0):
            return True
        locked = getattr(getattr(lock, "lock", None), "locked", None)   # (its own short lock)
        if locked is not None and locked():
            return True
    return False


def _wait_for_imports(deadline: float) -> None:
    while _importing() and time.monotonic() < deadline:
        time.sleep(0.002)


def _take_locks() -> None:
    taken = {id(lock) for lock in _held}
    while True:   # (a lock handed to `hold` meanwhile is taken too)
        todo = [lock for _, _, lock in sorted(_locks, key=lambda t: t[:2]) if id(lock) not in taken]
        if not todo:
            return
        todo[0].acquire()
        _held.append(todo[0])
        taken.add(id(todo[0]))


def _release() -> None:
    global _imp_held
    if _imp_held:
        _imp_held = False
        _imp.release_lock()
    while _held:
        _held.pop().release()


def _before_fork() -> None:
    global _imp_held
    deadline = time.monotonic() + IMPORT_WAIT_S
    for _ in range(_ROUNDS):
        _wait_for_imports(deadline)
        _take_locks()
        _imp.acquire_lock()
        _imp_held = True
        if not _importing() or time.monotonic() >= deadline:
            return
        _release()
    _take_locks()
    _imp.acquire_lock()
    _imp_held = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_release, after_in_child=_release)
