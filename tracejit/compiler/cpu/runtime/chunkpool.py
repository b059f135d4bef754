"""Launching chunk kernels (codegen_chunks.py) on a few persistent threads.

A chunk kernel is a serial ``nogil`` numba function that runs share ``t`` of ``nt`` of
its chunks. `ChunkKernel` is what a plan calls: it picks the share count (the cores
other processes leave us, as for numba's parallel kernels and BLAS: compiler/cpu/runtime/coreshare.py), hands
shares 1.. to the pool's threads, runs share 0 itself, waits, and for a full reduction
makes the one fold call (the partial results are an array it allocates per launch, so
a reduction's shares all write into one and the fold sees every share's chunks; a GIL-free
pair's last share makes that call itself: cshares.py). Each share unboxes its arguments under the GIL (a few us) and
releases it for the loop, so the shares run at once.

The threads are tracejit/compiler/cpu/runtime/sharepool.py's (they block on a lock between launches, no
spinning). One launch at a time: a second Python thread launching meanwhile runs its
kernel on one thread instead of waiting.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from . import sharepool
from .sharepool import pool_threads, run_shares as _run_shares
from ...codegen_chunks import PARTIALS
from ...codegen_cpu import column_partial_len

__all__ = ["ChunkKernel", "pool_threads"]


class ChunkKernel:
    """A chunk kernel as the plan calls it: with the nest's calling convention."""

    __slots__ = ("kernel", "entry", "partial_dtype", "partial_size", "serial", "unguarded", "pair", "pending")

    def __init__(self, kernel: Callable, entry: Callable, partial_dtype: Optional[str], serial: bool,
                 partial_size: tuple = ("fixed", PARTIALS), pair=None):
        self.kernel = kernel            # the numba dispatcher (for its metadata)
        self.unguarded = kernel
        self.entry = entry              # its compiled entry point (no type dispatch)
        self.partial_dtype = None if partial_dtype is None else np.dtype(
            "bool" if partial_dtype == "bool" else partial_dtype)
        self.serial = serial            # the serial-variant call: always one share
        self.partial_size = partial_size  # codegen_chunks.ChunkSpec.partial_size
        # A flat kernel's GIL-free pair (compiler/cpu/runtime/cshares.py: its two shares on this thread and
        # OpenBLAS's worker, no Python on either): cshares.CShares once loaded; `pending` its
        # cshares.Pending / Ready until then (None: sharepool's threads run the shares)
        self.pair = None
        self.pending = pair

    def __call__(self, *args):
        nt = 1 if self.serial else pool_threads()
        fold = self.partial_dtype is not None
        if fold:
            kind, v = self.partial_size
            size = v if kind == "fixed" else column_partial_len(args[v]) if kind == "columns" else args[v]
            args = args + (np.empty(size, self.partial_dtype),)
        if nt == 1 or not sharepool.try_launch():
            # one share (also when another thread is launching: no waiting for it)
            return self.entry(*args, 0, 1, 1) if fold else self.entry(*args, 0, 1)
        try:
            if nt == 2 and self.pending is not None:
                self.pair, self.pending = self.pending.poll()
            pair = self.pair
            if nt == 2 and pair is not None and sharepool.pair_on_blas_worker() \
                    and sharepool.blas_worker.find() is not None:
                pair(args)
                fold = fold and not pair.folds   # the pair's last share folded
            else:
                _run_shares(self.entry, args, (0,) if fold else (), nt)
        finally:
            sharepool.end_launch()
        if fold:
            self.entry(*args, nt, nt, 1)   # no chunks of its own: the fold only

    def pair_call(self, *args) -> bool:
        """The call as the GIL-free pair's two shares (this thread and OpenBLAS's worker),
        whatever share count the free cores would give `__call__`; False, having run
        nothing, where the pair cannot run now (not loaded yet, one core free, another
        thread's launch holding the pool, a folded reduction).

        For work that only this launch pays for (a few us on a worker awake after a
        product): `__call__` with more shares hands them to sharepool's threads through a
        lock, tens of us."""
        if self.serial or self.partial_dtype is not None or pool_threads() < 2:
            return False
        if not sharepool.try_launch():
            return False
        try:
            if self.pending is not None:
                self.pair, self.pending = self.pending.poll()
            pair = self.pair
            if pair is None or not sharepool.pair_on_blas_worker() or sharepool.blas_worker.find() is None:
                return False
            pair(args)
        finally:
            sharepool.end_launch()
        return True
