"""Launching chunk kernels (codegen_chunks.py) on a few persistent threads.

A chunk kernel is a serial ``nogil`` numba function that runs share ``t`` of ``nt`` of
its chunks. `ChunkKernel` is what a plan calls: it picks the share count (the cores
other processes leave us, as for numba's parallel kernels and BLAS: coreshare.py), hands
shares 1.. to the pool's threads, runs share 0 itself, waits, and for a full reduction
makes the one fold call (the partial results are an array it allocates per launch, so
a reduction's shares all write into one and the fold sees every share's chunks). Each share unboxes its arguments under the GIL (a few us) and
releases it for the loop, so the shares run at once.

Threads block on a lock between launches (no spinning: numba's OpenMP workers spin
after each kernel and took the next BLAS call's cores). One launch at a time: a second
Python thread launching meanwhile runs its kernel on one thread instead of waiting. A
forked child starts a pool of its own.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Optional

import numpy as np

from .. import coreshare
from ..threads import usable_cpus
from .codegen_chunks import PARTIALS
from .codegen_cpu import column_partial_len

__all__ = ["ChunkKernel", "pool_threads"]


class _Thread:
    """One pool thread: runs ``fn(*args, t, nt, ...)`` when released."""

    __slots__ = ("go", "done", "job", "error", "thread")

    def __init__(self):
        self.go = threading.Lock()
        self.done = threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._loop, daemon=True, name="tracejit-chunks")
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.go.acquire()
            fn, args = self.job
            self.job = None
            try:
                fn(*args)
            except BaseException as exc:  # raised again in the launching thread
                self.error = exc
            # Drop the job before waiting for the next: a thread that kept `args` until
            # then would hold the launch's arrays alive (memory) and add a reference the
            # autograd engine reads when it decides whether a gradient buffer is exclusive
            # (autograd/node.py `_exclusive`): a leaf's .grad would be copied or not
            # depending on whether the last launch had two shares.
            del fn, args
            self.done.release()


_threads: list = []
_launch = threading.Lock()
_cpus = None


def _reset_after_fork() -> None:
    global _threads, _launch
    _threads = []
    _launch = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def pool_threads() -> int:
    """Shares a launch may use now: the cores other processes leave this one."""
    global _cpus
    if _cpus is None:
        _cpus = usable_cpus()
    if coreshare.ENABLED:
        return max(1, min(_cpus, coreshare.core_share.threads()))
    return _cpus


def _run_shares(fn: Callable, args: tuple, tail: tuple, nt: int) -> None:
    """fn(*args, t, nt, *tail) for t in 0..nt-1, share 0 on this thread."""
    while len(_threads) < nt - 1:
        _threads.append(_Thread())
    used = _threads[:nt - 1]
    for t, th in enumerate(used, 1):
        th.job = (fn, args + (t, nt) + tail)
        th.go.release()
    error = None
    try:
        fn(*args, 0, nt, *tail)
    except BaseException as exc:
        error = exc
    for th in used:
        th.done.acquire()
        if th.error is not None and error is None:
            error = th.error
        th.error = None
    if error is not None:
        raise error


class ChunkKernel:
    """A chunk kernel as the plan calls it: with the nest's calling convention."""

    __slots__ = ("kernel", "entry", "partial_dtype", "partial_size", "serial", "unguarded")

    def __init__(self, kernel: Callable, entry: Callable, partial_dtype: Optional[str], serial: bool,
                 partial_size: tuple = ("fixed", PARTIALS)):
        self.kernel = kernel            # the numba dispatcher (for its metadata)
        self.unguarded = kernel
        self.entry = entry              # its compiled entry point (no type dispatch)
        self.partial_dtype = None if partial_dtype is None else np.dtype(
            "bool" if partial_dtype == "bool" else partial_dtype)
        self.serial = serial            # the serial-variant call: always one share
        self.partial_size = partial_size  # codegen_chunks.ChunkSpec.partial_size

    def __call__(self, *args):
        nt = 1 if self.serial else pool_threads()
        fold = self.partial_dtype is not None
        if fold:
            kind, v = self.partial_size
            size = v if kind == "fixed" else column_partial_len(args[v]) if kind == "columns" else args[v]
            args = args + (np.empty(size, self.partial_dtype),)
        if nt == 1 or not _launch.acquire(blocking=False):
            # one share (also when another thread is launching: no waiting for it)
            return self.entry(*args, 0, 1, 1) if fold else self.entry(*args, 0, 1)
        try:
            _run_shares(self.entry, args, (0,) if fold else (), nt)
        finally:
            _launch.release()
        if fold:
            self.entry(*args, nt, nt, 1)   # no chunks of its own: the fold only
