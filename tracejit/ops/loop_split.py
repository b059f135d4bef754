"""A recurrent layer's time loop on two threads: a per-step barrier for numba kernels
(`barrier_source`) and the runner that calls a loop kernel on two threads at once (`run`).

Why: the whole-loop kernels (ops/lstm_kernels.py) run every step's small GEMM and gate
math on one thread; for the LSTM LM (batch 32, hidden 256, 2 layers, 64 steps) the loops
were ~48 ms of an 85 ms two-thread training step, while PyTorch's oneDNN loops use both
cores. A step's work splits by hidden units: thread q owns units u0..u1 (their rows of the
four gate blocks of W, their gate math, their rows of dh), and the threads meet once per
step, where the next step's GEMM reads the whole state the other thread wrote. One
parallel launch per step (numba's prange) cost more than the split saved (session 14);
here the kernel is called once per layer on each thread and the threads meet at a
spinning barrier on a shared counter (a few hundred ns when both run).

Who runs the second share: OpenBLAS's own pool worker where numpy's BLAS is a pthreads
OpenBLAS with a pool of two or more (`sharepool.BlasWorker`: that worker busy-waits on the second
core after every threaded product anyway, and a thread of ours would get half of that
core), else a thread of tracejit's pool (tracejit/sharepool.py, the chunk kernels' threads).

A spinning barrier is only good while both threads have a core: a thread whose partner
waits behind another process spins for a scheduler time slice at every step. So the
split is used only when `threads` says so: tracejit.coreshare's count for large products
(the BLAS count it gives; 1 when other processes keep a core busy, or when the user set
BLAS to one thread), and the barrier calls ``sched_yield`` after a few microseconds of
spinning so that a descheduled partner gets a core sooner.

`barrier_source()` (numba source a kernel module includes): ``barrier(sync, k, nth)``
waits until all `nth` threads have passed their k-th barrier (``sync[0]`` counts arrivals;
a nonzero ``sync[ABORT]`` ends every wait: the runner sets it when the other thread's
call failed, so no thread spins forever); ``split_units(hh, q, nth)`` is thread q's units.
"""
from __future__ import annotations

import numpy as np

from .. import sharepool
from ..threads import openblas_pthreads as _pthreads_build  # noqa: F401  (tests read it here)

__all__ = ["barrier_source", "ABORT", "QUANTUM", "new_sync", "threads", "run"]

ABORT = 8          # sync's abort flag, a cache line away from the counter
# Hidden units per thread come in multiples of this: whole register-transpose blocks (16
# float32 values with AVX-512) and GEMM panels (8 rows at most), so each thread's share of
# a gate block starts on a block and a panel.
QUANTUM = 16

_SPINS = 2000      # pause instructions (~30-100 ns each) before each sched_yield


def _pause_name() -> str:
    """The spin-wait hint of this CPU's LLVM target, or "" (none)."""
    import llvmlite.binding as ll
    triple = ll.get_process_triple()
    return "llvm.x86.sse2.pause" if triple.startswith(("x86_64", "i386", "i686")) else ""


_BARRIER = '''
from numba import njit as _bnjit, types as _bt
from numba.extending import intrinsic as _bintrinsic
from llvmlite import ir as _bir

_BABORT, _BSPINS, _BPAUSE = {abort}, {spins}, "{pause}"
SPLIT_Q = {quantum}


def _bptr(context, builder, ty, arr, idx, ity):
    data = context.make_array(ty)(context, builder, arr).data
    return builder.gep(data, [context.cast(builder, idx, ity, _bt.int64)])


@_bintrinsic
def _atomic_add(typingctx, arr, idx, val):
    # arr[idx] += val, atomically and sequentially consistent (a full fence: this thread's
    # earlier stores are visible to whoever sees the new count)
    sig = _bt.void(arr, idx, val)

    def codegen(context, builder, sig, args):
        p = _bptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = context.cast(builder, args[2], sig.args[2], _bt.int64)
        builder.atomic_rmw("add", p, v, "seq_cst")
        return context.get_dummy_value()
    return sig, codegen


@_bintrinsic
def _atomic_load(typingctx, arr, idx):
    # arr[idx], an acquire load: never hoisted out of a waiting loop, and the other
    # thread's stores before its atomic add are visible after it
    sig = _bt.int64(arr, idx)

    def codegen(context, builder, sig, args):
        p = _bptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return builder.load_atomic(p, "acquire", 8)
    return sig, codegen


@_bintrinsic
def _spin_pause(typingctx):
    # the CPU's spin-wait hint (x86 pause), else nothing
    sig = _bt.void()

    def codegen(context, builder, sig, args):
        if _BPAUSE:
            from numba.core import cgutils
            fn = cgutils.get_or_insert_function(builder.module, _bir.FunctionType(_bir.VoidType(), []), _BPAUSE)
            builder.call(fn, [])
        return context.get_dummy_value()
    return sig, codegen


@_bintrinsic
def _sched_yield(typingctx):
    # libc's sched_yield: let a descheduled partner (or another process) have this core
    sig = _bt.void()

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        fn = cgutils.get_or_insert_function(builder.module, _bir.FunctionType(_bir.IntType(32), []),
                                            "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()
    return sig, codegen


@_bnjit(inline='always')
def barrier(sync, k, nth):
    # wait until all nth threads have arrived here for the k-th time (k = 1, 2, ...)
    _atomic_add(sync, 0, 1)
    target = k * nth
    spins = 0
    while _atomic_load(sync, 0) < target:
        if _atomic_load(sync, _BABORT) != 0:
            return
        spins += 1
        if spins < _BSPINS:
            _spin_pause()
        else:
            _sched_yield()
            spins = 0


@_bnjit(inline='always')
def split_units(hh, q, nth):
    # thread q's hidden units (u0, u1) of hh: whole quanta of SPLIT_Q (vector blocks and
    # GEMM panels), the last thread taking the rest
    if nth == 1:
        return 0, hh
    part = hh // nth // SPLIT_Q * SPLIT_Q
    return q * part, (q + 1) * part if q + 1 < nth else hh
'''


def barrier_source() -> str:
    """The barrier's numba source for this CPU (``barrier``, ``split_units``; the pause hint
    is part of the kernel source, so the disk cache keys on it)."""
    return (_BARRIER.replace("{abort}", str(ABORT)).replace("{spins}", str(_SPINS))
            .replace("{quantum}", str(QUANTUM)).replace("{pause}", _pause_name()))


def new_sync() -> np.ndarray:
    """A fresh barrier state for one split call."""
    return np.zeros(2 * ABORT, dtype=np.int64)


def threads(hidden: int, quantum: int = QUANTUM) -> int:
    """Threads a layer loop of `hidden` units may split over now: 2 when the thread policy
    gives large products two BLAS threads (tracejit.coreshare; BLAS's own count where the
    policy is off) and each thread gets at least `quantum` units (whole vector blocks and
    GEMM panels), else 1."""
    if hidden < 2 * quantum or hidden % quantum:
        return 1
    from .. import coreshare
    from ..threads import blas_threads
    coreshare.adapt_blas()                  # the count follows the load (no-op when turned off)
    return 2 if (blas_threads() or 1) >= 2 else 1


_use_blas_pool = True    # tests turn it off to run the shares on tracejit's own pool


def _share(kernel, args: tuple, sync, q: int, nth: int) -> None:
    """Share q of a split call (tracejit/sharepool.py `run_pair` runs share 1 on OpenBLAS's
    worker or on a thread of its pool)."""
    try:
        kernel(*args, q, nth, sync)
    except BaseException:
        sync[ABORT] = 1        # never leave the other share spinning at the barrier
        raise


# OpenBLAS's worker as the partner (tracejit/sharepool.py `BlasWorker`; tests call its `find`)
_pool = sharepool.blas_worker


def run(kernel, args: tuple, nth: int) -> None:
    """``kernel(*args, q, nth, sync)`` for q = 0 .. nth-1 at once (nth 1 or 2): q = 0 on
    this thread, q = 1 on OpenBLAS's worker (`sharepool.run_pair`) or else on tracejit's thread pool
    (tracejit/sharepool.py). Runs ``kernel(*args, 0, 1, sync)`` alone when nth is 1 or
    another launch holds the pool."""
    sync = new_sync()
    if nth < 2 or not sharepool.try_launch():
        kernel(*args, 0, 1, sync)
        return
    try:
        sharepool.run_pair(_share, (kernel, args, sync), on_blas_worker=_use_blas_pool)
    finally:
        sharepool.end_launch()
