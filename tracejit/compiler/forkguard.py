"""What ``os.fork`` waits for, so that a forked child never inherits work half done by a
thread it does not have: the locks handed to `hold` and every module import in progress in
another thread (in the child such a module stays "being imported" for good).

One hook, registered early (before any background thread), reads its list of locks at each
fork: os.fork takes the before-hooks registered when it began but the after-hooks
registered by its end. It also holds CPython's import lock from its last look at the
imports to the fork, so no thread starts an import in between; the child's after-hooks
release it.
"""
from __future__ import annotations

import _imp
import os
import threading
import time

__all__ = ["hold"]

# How long a fork waits for other threads' imports before going on regardless (an import
# waiting for a lock the forking thread holds would hold it for good).
IMPORT_WAIT_S = 10.0
# Rounds of (imports done, locks taken): an import that began while we waited for a lock
# may need that lock; we let go and wait for it.
_ROUNDS = 20

_locks: list = []    # [(rank, sequence, lock)], fork order: lowest rank first
_held: list = []     # the locks the running fork took (released after it, in reverse)
_imp_held = False    # and CPython's import lock


def hold(lock, rank: int) -> None:
    """Have every ``os.fork`` wait for `lock` and release it after, in parent and child.
    `rank` orders the locks: outer ones lowest."""
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
        while _importing() and time.monotonic() < deadline:
            time.sleep(0.002)
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
