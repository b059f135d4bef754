"""Numpy forms shared over the cores: `halves(fn, n, work)` runs ``fn(lo, hi)`` over
``[0, n)`` as one part per core at once, on tracejit's own pool threads.

Why not `sharepool.split`, which the hand-written kernels use: its parts are four per share
and the second of two shares runs on OpenBLAS's worker thread, which suits one nogil kernel
call per part. A numpy form's part is a dozen numpy calls, each taking the GIL back between
its loops; cut finer, or entered from OpenBLAS's thread, the parts spent what they saved
(BatchNorm backward's numpy form on LeNet's two calls, one process, a second core free at
nice -20: 4.75-5.0 ms on one thread, 5.2-5.7 through split with two shares, 3.2-3.3 as two
halves on tracejit's thread). The gate is split's: as many parts as cores the machine gives
now (`sharepool.pool_threads`: other processes' load), never above BLAS's own ceiling (a
process kept on one BLAS thread stays on one), one part on this thread below
`sharepool.SPLIT_MIN_WORK` or while another launch holds the pool.

For the numpy forms of a cold process's tier 0 (compiler/tiers.py), whose calls run before
any kernel is compiled: there the second core is otherwise idle.
"""
from __future__ import annotations

from typing import Callable

from .. import coreshare, sharepool
from ..threads import blas_threads_set

__all__ = ["halves"]


def halves(fn: Callable[[int, int], None], n: int, work: int) -> None:
    """``fn(lo, hi)`` over ``[0, n)``: one contiguous part per core given now, at once (see
    the module docstring), else ``fn(0, n)`` here. ``work`` is in `sharepool.split`'s unit
    (multiply-adds of a BLAS product); the parts must be independent and write apart."""
    nt = min(n, sharepool.pool_threads()) if n > 1 and work >= sharepool.SPLIT_MIN_WORK else 1
    if nt > 1:
        nt = min(nt, coreshare.blas_ceiling() or 1)
    if nt < 2 or not sharepool.try_launch():
        fn(0, n)
        return
    try:
        with blas_threads_set(1):
            sharepool.run_shares(_part, (fn, n), (), nt)
    finally:
        sharepool.end_launch()


def _part(fn: Callable[[int, int], None], n: int, t: int, nt: int) -> None:
    fn(n * t // nt, n * (t + 1) // nt)
