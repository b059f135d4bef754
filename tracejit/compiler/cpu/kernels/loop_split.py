"""A recurrent layer's time loop on as many threads as the machine gives: a per-step meeting
for numba kernels that lets any thread do a late thread's share (`meeting_source`), and the
runner that calls a loop kernel's shares on tracejit's worker pool at once (`run`).

Why: the whole-loop kernels run every step on one thread (~48 ms of the LSTM LM's 85 ms
step), where PyTorch uses every core. A step splits by hidden units into nth shares, share
q owning units u0..u1, and the threads meet once per step at a spinning wait on a shared
counter (a parallel launch per step cost more than the split saved). Share 0 runs on the
caller, the others on the worker pool (runtime/workpool.py) through `sharepool.run_shares`.

A spinning wait is only good while every thread has a core, so each step's work is nth
shares a thread claims (compare-and-swap) before doing them; a thread that finished its
share and waited `LATE_NS` for a share no thread has claimed takes it, and takes unclaimed
shares at once in the following steps until it finds none. A late thread thus costs one
`LATE_NS` wait per call, not a time slice per step, and a share the pool runs after the
others returned (more shares than threads) finds its work done. Every thread computes a
share the same way, so the results are one thread's bits whatever the timing and the count.

`meeting_source()` gives ``next_half(sync, k, q, nth, st)`` (the share of step k thread q
does next; -1: done), ``half_done``, ``wait_turn`` / ``turn_done`` (a share's work after
its mark, in step order) and ``split_units(hh, q, nth)``; a nonzero ``sync[ABORT]`` ends
every wait, so no thread spins forever after another failed.
"""
from __future__ import annotations

import time

import numpy as np

from ..runtime import sharepool

__all__ = ["meeting_source", "THREAD_START", "ABORT", "CLAIM", "TAKEN", "WAITED", "TURN", "STRIDE", "LATE_NS",
           "QUANTUM", "MIN_WORK", "new_sync", "threads", "run", "counts", "Stalls", "stalls"]

# A thread's meeting state as a call starts, [absent, took, first]: `thread_state()` in the
# numba source, or an array made from it by a kernel's caller (compiler/cpu/kernels/lstm_kernels.py)
THREAD_START = (0, 0, 1)
# sync's words (int64): the steps' counter at 0 and each of the others a cache line apart
ABORT = 8          # sync[ABORT]: the abort flag
TAKEN = 16         # sync[TAKEN]: shares a thread did for a late one (a count, for tests and stats)
WAITED = 24        # sync[WAITED]: thread 0's longest wait in ns for a step others were still at
STRIDE = 16        # words from one share's pair of lines to the next's
CLAIM = 32         # sync[CLAIM + STRIDE h]: the first step whose share h is not claimed yet
TURN = 40          # sync[TURN + STRIDE h]: steps whose work after the meeting (`turn_done`) share h has done
# A waiting thread takes a share no thread has begun this long after the wait began (a
# running thread begins within microseconds; a share is ~70 us).
LATE_NS = 50_000
# Hidden units per share come in multiples of this: whole register-transpose blocks and
# GEMM panels.
QUANTUM = 16
# Multiply-adds of a call below which its loop runs on one thread: a launch on the pool
# costs tens of microseconds and a GIL handoff per share.
MIN_WORK = 1 << 22

_SPINS = 2000      # pause instructions (~30-100 ns each) before each sched_yield while
                   # other threads work on shares they claimed (one may share this core)


def _pause_name() -> str:
    """The spin-wait hint of this CPU's LLVM target, or "" (none)."""
    import llvmlite.binding as ll
    triple = ll.get_process_triple()
    return "llvm.x86.sse2.pause" if triple.startswith(("x86_64", "i386", "i686")) else ""


_MEETING = '''
from numba import njit as _bnjit, types as _bt
from numba.extending import intrinsic as _bintrinsic
from llvmlite import ir as _bir
import numpy as np

_BABORT, _BSPINS, _BPAUSE = {abort}, {spins}, "{pause}"
_BCLAIM, _BTAKEN, _BLATE_NS, _BCLOCK, _BWAITED, _BTURN = {claim}, {taken}, {late}, {clock}, {waited}, {turn}
_BSTRIDE = {stride}
SPLIT_Q = {quantum}


def _bptr(context, builder, ty, arr, idx, ity):
    data = context.make_array(ty)(context, builder, arr).data
    return builder.gep(data, [context.cast(builder, idx, ity, _bt.int64)])


@_bintrinsic
def _atomic_add(typingctx, arr, idx, val):
    # arr[idx] += val, atomically and sequentially consistent (a full fence)
    sig = _bt.void(arr, idx, val)

    def codegen(context, builder, sig, args):
        p = _bptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = context.cast(builder, args[2], sig.args[2], _bt.int64)
        builder.atomic_rmw("add", p, v, "seq_cst")
        return context.get_dummy_value()
    return sig, codegen


@_bintrinsic
def _atomic_load(typingctx, arr, idx):
    # arr[idx], an acquire load: never hoisted out of a waiting loop
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
    # libc's sched_yield: let a descheduled thread of ours (or another process) have this core
    sig = _bt.void()

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        fn = cgutils.get_or_insert_function(builder.module, _bir.FunctionType(_bir.IntType(32), []),
                                            "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()
    return sig, codegen


@_bintrinsic
def _cas(typingctx, arr, idx, expected, new):
    # arr[idx] = new if arr[idx] == expected, atomically: of two threads, exactly one wins
    sig = _bt.boolean(arr, idx, expected, new)

    def codegen(context, builder, sig, args):
        p = _bptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        e = context.cast(builder, args[2], sig.args[2], _bt.int64)
        v = context.cast(builder, args[3], sig.args[3], _bt.int64)
        res = builder.cmpxchg(p, e, v, "seq_cst", "seq_cst")
        return builder.extract_value(res, 1)
    return sig, codegen


@_bintrinsic
def _now_ns(typingctx):
    # the monotonic clock in ns (libc's clock_gettime: a vDSO read, ~20 ns)
    sig = _bt.int64()

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        i64 = _bir.IntType(64)
        spec = _bir.LiteralStructType([i64, i64])
        ts = cgutils.alloca_once(builder, spec)
        fn = cgutils.get_or_insert_function(
            builder.module, _bir.FunctionType(_bir.IntType(32), [_bir.IntType(32), spec.as_pointer()]),
            "clock_gettime")
        builder.call(fn, [_bir.Constant(_bir.IntType(32), _BCLOCK), ts])
        sec = builder.load(builder.gep(ts, [_bir.Constant(_bir.IntType(32), 0), _bir.Constant(_bir.IntType(32), 0)]))
        nsec = builder.load(builder.gep(ts, [_bir.Constant(_bir.IntType(32), 0), _bir.Constant(_bir.IntType(32), 1)]))
        return builder.add(builder.mul(sec, _bir.Constant(i64, 1000000000)), nsec)
    return sig, codegen


@_bnjit(inline='always')
def thread_state():
    # a thread's state across steps for `next_half`: [absent, took, first] (`THREAD_START`)
    st = np.zeros(3, dtype=np.int64)
    st[0], st[1], st[2] = {thread_start}
    return st


@_bnjit(inline='always')
def _step_end(st):
    # step over: another thread was absent if this one took its share
    st[0] = st[1]
    st[1] = 0
    st[2] = 1
    return -1


@_bnjit(inline='always')
def _unclaimed(sync, k, q, nth):
    # a share of step k no thread has claimed yet (the others', from q's right), or -1
    for i in range(1, nth):
        h = q + i if q + i < nth else q + i - nth
        if _atomic_load(sync, _BCLAIM + _BSTRIDE * h) == k:
            return h
    return -1


@_bnjit(inline='always')
def _take(sync, k, q, nth, st):
    # claim an unclaimed share of step k for this thread (one a late thread has not begun),
    # or -1 where none is left
    h = _unclaimed(sync, k, q, nth)
    while h >= 0:
        if _cas(sync, _BCLAIM + _BSTRIDE * h, k, k + 1):
            _atomic_add(sync, _BTAKEN, 1)
            st[1] = 1
            return h
        h = _unclaimed(sync, k, q, nth)
    return -1


@_bnjit(inline='always')
def next_half(sync, k, q, nth, st):
    # The share of step k this thread (q of nth) does next, or -1 once every share of step
    # k is done; st: this thread's `thread_state`. A share is done by the thread that claims
    # it. This thread claims its own share, then waits for the step; a share no thread has
    # claimed _BLATE_NS into the wait is taken, and at once in the following steps until
    # this thread finds none to take (the module docstring). Results do not depend on who
    # does a share.
    first = st[2] != 0
    st[2] = 0
    if nth == 1:
        return 0 if first else _step_end(st)
    if first and _cas(sync, _BCLAIM + _BSTRIDE * q, k, k + 1):
        return q
    target = nth * (k + 1)
    if _atomic_load(sync, 0) >= target:
        return _step_end(st)
    if st[0] != 0:
        h = _take(sync, k, q, nth, st)
        if h >= 0:
            return h
    start = _now_ns()
    spins = 0
    while _atomic_load(sync, 0) < target:
        if _atomic_load(sync, _BABORT) != 0:
            break
        _spin_pause()
        spins += 1
        if spins % 64 == 0:
            if _unclaimed(sync, k, q, nth) >= 0:
                # a share no thread has begun
                if _now_ns() - start > _BLATE_NS:
                    h = _take(sync, k, q, nth, st)
                    if h >= 0:
                        return h
            elif spins >= _BSPINS:
                # every share is at work: if one of their threads shares this core, let it run
                _sched_yield()
                spins = 0
    if q == 0:
        # the launcher's longest wait (loop_split.stalls)
        waited = _now_ns() - start
        if waited > sync[_BWAITED]:
            sync[_BWAITED] = waited
    return _step_end(st)


@_bnjit(inline='always')
def half_done(sync, nth):
    # this thread's half of the current step is written; one thread alone counts the same
    _atomic_add(sync, 0, 1)


@_bnjit(inline='always')
def wait_turn(sync, h, k):
    # A half's work after `half_done` runs in step order: before step k's, wait until step
    # k - 1's of half h is done, whoever did it; then `turn_done`. One thread never waits.
    spins = 0
    while _atomic_load(sync, _BTURN + _BSTRIDE * h) < k:
        if _atomic_load(sync, _BABORT) != 0:
            break
        _spin_pause()
        spins += 1
        if spins >= _BSPINS:
            _sched_yield()
            spins = 0


@_bnjit(inline='always')
def turn_done(sync, h):
    # half h's work after the meeting of its current step is written (see `wait_turn`)
    _atomic_add(sync, _BTURN + _BSTRIDE * h, 1)


@_bnjit(inline='always')
def split_units(hh, q, nth):
    # share q's hidden units (u0, u1) of hh: the whole quanta spread evenly over the nth
    # shares, the last taking the rest
    if nth == 1:
        return 0, hh
    nq = hh // SPLIT_Q
    return nq * q // nth * SPLIT_Q, nq * (q + 1) // nth * SPLIT_Q if q + 1 < nth else hh
'''


def meeting_source() -> str:
    """The meeting's numba source for this CPU (the pause hint and clock id are in the
    source, so the disk cache keys on them)."""
    import time
    return (_MEETING.replace("{abort}", str(ABORT)).replace("{spins}", str(_SPINS))
            .replace("{claim}", str(CLAIM)).replace("{taken}", str(TAKEN)).replace("{late}", str(LATE_NS))
            .replace("{waited}", str(WAITED)).replace("{turn}", str(TURN)).replace("{stride}", str(STRIDE))
            .replace("{thread_start}", ", ".join(map(str, THREAD_START)))
            .replace("{clock}", str(getattr(time, "CLOCK_MONOTONIC", 1)))   # POSIX (Linux: 1)
            .replace("{quantum}", str(QUANTUM)).replace("{pause}", _pause_name()))


def new_sync(nth: int = 1) -> np.ndarray:
    """A fresh meeting state for one call of `nth` shares (counter, abort flag, shares
    taken, the launcher's longest wait, each share's claim and turn)."""
    return np.zeros(CLAIM + STRIDE * max(1, nth), dtype=np.int64)


class Stalls:
    """The launcher's waits for shares other threads had begun (`waited`), and whether the
    loops follow BLAS's ceiling or the load policy's count (`punctual`).

    Why: a thread descheduled inside a share it claimed holds the launcher for a time slice
    or, behind higher-priority processes, seconds. Waits over STALL_S are stalls; their
    time, less STALL_SHARE of the wall time since (a leaky bucket), beyond STALL_BUDGET_S
    benches the extra threads for BENCH_S, doubled per repeat up to BENCH_MAX_S: `threads`
    follows the load policy meanwhile."""

    STALL_S = 1e-3
    STALL_SHARE = 0.1
    STALL_BUDGET_S = 0.05
    BENCH_S = 2.0
    BENCH_MAX_S = 120.0
    STRIKES_RESET_S = 60.0

    def __init__(self):
        self.benched_until = 0.0
        self.stalls = 0
        self._debt = 0.0
        self._debt_at = 0.0
        self._strikes = 0
        self._last_bench = -1e9

    def waited(self, seconds: float) -> None:
        """A launcher's longest wait for a share another thread had begun, after its launch."""
        if seconds <= self.STALL_S:
            return
        now = time.monotonic()
        self.stalls += 1
        self._debt = max(0.0, self._debt - (now - self._debt_at) * self.STALL_SHARE) + seconds
        self._debt_at = now
        if self._debt > self.STALL_BUDGET_S:
            self._debt = 0.0
            self._strikes = 1 if now - self._last_bench > self.STRIKES_RESET_S else self._strikes + 1
            self._last_bench = now
            self.benched_until = now + min(self.BENCH_MAX_S, self.BENCH_S * 2.0 ** (self._strikes - 1))

    def punctual(self) -> bool:
        """Whether no launch has waited long for another thread lately (`waited`)."""
        return time.monotonic() >= self.benched_until


stalls = Stalls()


def threads(hidden: int, quantum: int = QUANTUM, work: int = MIN_WORK) -> int:
    """Shares a layer loop of `hidden` units splits into: the threads BLAS may use (its
    ceiling: the CPUs this process may use, or the user's `set_num_threads`; not the load
    policy's count now, as a late thread costs one `LATE_NS` wait), at most one per
    `quantum` units; 1 where `hidden` is not whole quanta or the call's `work`
    (multiply-adds) is below `MIN_WORK` (LSTM LM step on two cores: 96.6 ms against 103.0
    unsplit). The policy's count decides while the extra threads are benched (`Stalls`),
    and 1 while we cede a core to a compile worker."""
    if hidden < 2 * quantum or hidden % quantum or work < MIN_WORK:
        return 1
    from ..runtime import coreshare
    from ....threads import blas_threads
    policy = coreshare.adapt_blas()         # (also notices a count the user set meanwhile)
    ceiling = coreshare.blas_ceiling() or 1
    if ceiling < 2 or coreshare.ceding():
        return 1     # (ceding: a compile worker of ours has a core, as BLAS's count says)
    n = ceiling if stalls.punctual() or not policy else (blas_threads() or 1)
    return max(1, min(n, hidden // quantum))


def _share(kernel, args: tuple, sync, q: int, nth: int) -> None:
    """Share q of a split call."""
    try:
        kernel(*args, q, nth, sync)
    except BaseException:
        sync[ABORT] = 1        # never leave another share waiting for a share it claimed
        raise


# Split calls made and shares a thread did for a late one (sync[TAKEN]) in this process:
# how often a thread was late (tests, measurements).
counts = {"split": 0, "taken": 0}


def run(kernel, args: tuple, nth: int) -> None:
    """``kernel(*args, q, nth, sync)`` for q = 0 .. nth-1 at once: q = 0 here, the others on
    the worker pool (`sharepool.run_shares`; shares beyond its threads after q = 0, where
    they find their work taken); ``kernel(*args, 0, 1, sync)`` alone when nth is 1 or
    another launch holds the pool. An error of any share is raised once all ended."""
    if nth < 2 or not sharepool.try_launch():
        kernel(*args, 0, 1, new_sync())
        return
    sync = new_sync(nth)
    try:
        sharepool.run_shares(_share, (kernel, args, sync), (), nth)
    finally:
        sharepool.end_launch()
    stalls.waited(sync[WAITED] * 1e-9)
    counts["split"] += 1
    counts["taken"] += int(sync[TAKEN])
