"""Shares of one piece of work run at once on tracejit's worker pool (workpool.py).

Share 0 runs on the calling thread, share q on the pool's worker q - 1 (`PoolShares`),
shares beyond the pool's threads on the calling thread after share 0; the shares release
the GIL for their loops. Without a pool of two threads they run one after the other here.
One launch at a time: a second thread launching meanwhile runs its work on one thread
instead of waiting.

`split(fn, n)` is for many small independent BLAS products (attention's per-head products):
each is too small for BLAS's own threads to pay, so each share runs its part on one BLAS
thread. Launches whose shares claim their work (the recurrent loops, loop_split.py) run
through `run_shares` too: a share that begins late finds its work taken.
"""
from __future__ import annotations

import ctypes
import functools
import itertools
import os
import threading
import time
from typing import Callable

from . import coreshare
from .... import threads as _threads
from ....threads import blas_threads_set

__all__ = ["pool_threads", "try_launch", "end_launch", "run_shares", "launch", "worked", "warm",
           "PoolShares", "pool_shares",
           "split", "SPLIT_MIN_WORK", "PARTS_PER_SHARE"]

# Multiply-adds below which `split` runs on the calling thread alone: a handoff to a pool
# thread costs tens of microseconds, a 128x128x64 product about 30.
SPLIT_MIN_WORK = 1 << 22


try_launch: Callable[[], bool]      # (both set by `_new_launch_lock`)
end_launch: Callable[[], None]


def _new_launch_lock() -> None:
    """The one-launch-at-a-time lock; ``try_launch()`` takes it (False when another thread
    holds it: run on one thread then) and ``end_launch()`` gives it back. Bound C methods,
    not Python wrappers: `end_launch` runs right after cache-sweeping kernels, where a
    Python frame cost ~2 us."""
    global _launch, try_launch, end_launch
    _launch = threading.Lock()
    try_launch = functools.partial(_launch.acquire, False)
    end_launch = _launch.release


_new_launch_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_launch_lock)


def pool_threads() -> int:
    """Shares a launch may use now: the cores other processes leave this one (at most the
    count `set_num_threads` set, and the CPUs it may use, `CoreShare.cpus`)."""
    share = coreshare.core_share
    return share.threads() if coreshare.ENABLED else min(share.cpus, _threads.thread_ceiling())


def run_shares(fn: Callable, args: tuple, tail: tuple, nt: int) -> None:
    """fn(*args, t, nt, *tail) for t in 0..nt-1, share 0 on this thread and the others on the
    worker pool (`PoolShares`), or one after the other here without a pool of two threads.
    The caller holds the launch (`try_launch`); an exception in any share is raised here,
    after all ended."""
    pool_run = pool_shares.find()
    if pool_run is not None:
        pool_shares.run(pool_run, fn, args, nt, tail)
        return
    for t in range(nt):
        fn(*args, t, nt, *tail)


class PoolShares:
    """tracejit's worker pool as a launch's shares: ``run(nt, entry, records, stride)``, the
    calling thread doing the first share, the pool's workers the others.

    Why that pool: OpenBLAS runs its threaded products on it too, and its worker polls a
    while after each job, so the work right after a product finds it awake with the
    operands in its cache (attention backward ~10% faster than with a thread woken
    through a lock)."""

    def __init__(self):
        self.fn = None        # the pool's `run`, or None: no pool of two threads here
        self.pool = None      # threads in the pool, the caller included
        self.job = None
        self.qs = (ctypes.c_int64 * 0)()   # the share numbers 0 .. len - 1 the records hold
        self.found = False
        self._finding = threading.Lock()

    def find(self):
        """The pool's ``run`` where it has two threads or more, else None. Looked up once,
        under a lock, `found` set only after: threads racing the lookup read the machine as
        having one thread and rendered kernels for it."""
        if not self.found:
            with self._finding:
                if not self.found:
                    self._find()
                    self.found = True
        return self.fn if self.fn is not None and self.pool >= 2 else None

    def _find(self) -> None:
        from . import workpool
        try:
            p = workpool.pool()
        except Exception:   # (no llvmlite, no futex here: shares one after the other)
            self.fn = None
            return
        self.pool = p.threads
        self.share = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._share)
        self.fn = p.run

    def _share(self, ptr) -> None:
        q = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int64))[0]
        fn, args, nt, tail, errors = self.job
        try:
            fn(*args, q, nt, *tail)
        except BaseException as exc:   # raised by `run` once every share ended
            errors.append(exc)

    def run(self, pool_run, fn: Callable, args: tuple, nt: int = 2, tail: tuple = ()) -> None:
        """fn(*args, q, nt, *tail) for q = 0 (this thread) and 1.. (the pool's workers) at once."""
        if len(self.qs) < nt:
            self.qs = (ctypes.c_int64 * nt)(*range(nt))
        errors: list = []
        self.job = (fn, args, nt, tail, errors)
        try:
            pool_run(nt, self.share, ctypes.addressof(self.qs), ctypes.sizeof(ctypes.c_int64))
        finally:
            self.job = None
        if errors:
            raise errors[0]


pool_shares = PoolShares()

# How long after a job of several shares the pool's workers are taken as still polling, with the
# job's operands in both caches; woken from sleep, a 100K-element pair cost more than
# numpy's loop.
WARM_S = 2.5e-4
_warm_until = 0.0


def worked() -> None:
    """Note that a job of several shares just ended (`warm` holds for WARM_S)."""
    global _warm_until
    _warm_until = time.perf_counter() + WARM_S


def warm() -> bool:
    """Whether a job of several shares ended within WARM_S (`worked`)."""
    return time.perf_counter() <= _warm_until


def launch(fn: Callable, args: tuple, nt: int) -> int:
    """fn(*args, t, nt) for t in 0..nt-1 at once (`run_shares`), or ``fn(*args, 0, 1)`` here
    when `nt` is 1 or another launch holds the pool; returns the share count run. For nogil
    kernels whose shares take work from a shared counter (voidptr `claim`)."""
    if nt < 2 or not try_launch():
        fn(*args, 0, 1)
        return 1
    try:
        run_shares(fn, args, (), nt)
    finally:
        end_launch()
    return nt


# Parts per share `split` cuts its range into: shares take parts in turn, so a share whose
# thread starts late takes fewer and the caller does the rest instead of waiting.
PARTS_PER_SHARE = 4


def _take_parts(fn: Callable, n: int, parts: int, next_part: Callable, t: int, nt: int) -> None:
    while True:
        p = next_part()          # itertools.count's __next__: atomic under the GIL
        if p >= parts:
            return
        fn(n * p // parts, n * (p + 1) // parts)


def split(fn: Callable[[int, int], None], n: int, work: int) -> None:
    """``fn(lo, hi)`` over ``[0, n)`` in contiguous parts taken in turn by shares on the pool,
    one per core the machine gives now (never above BLAS's ceiling), BLAS on one thread
    meanwhile; or ``fn(0, n)`` here when one core is given, ``work`` (multiply-adds) is
    below `SPLIT_MIN_WORK`, or another launch holds the pool. ``fn`` must release the GIL
    and its parts must be independent."""
    nt = min(n, pool_threads()) if n > 1 and work >= SPLIT_MIN_WORK else 1
    if nt > 1:
        nt = min(nt, coreshare.blas_ceiling() or 1)
    if nt < 2 or not try_launch():
        fn(0, n)
        return
    try:
        parts = min(n, PARTS_PER_SHARE * nt)
        args = (fn, n, parts, itertools.count().__next__)
        with blas_threads_set(1):
            run_shares(_take_parts, args, (), nt)
    finally:
        end_launch()
