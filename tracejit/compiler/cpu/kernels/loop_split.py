"""A recurrent layer's time loop on two threads: a per-step meeting for numba kernels that
lets either thread do the other's share when it is late (`meeting_source`), and the runner
that calls a loop kernel on two threads at once (`run`).

Why: the whole-loop kernels run every step on one thread (~48 ms of the LSTM LM's 85 ms
step), where PyTorch uses both cores. A step splits by hidden units, thread q owning units
u0..u1, and the threads meet once per step at a spinning wait on a shared counter (a
parallel launch per step cost more than the split saved). The second share runs on
`sharepool.Partner`, which the caller does not wait for once its own share returned.

A spinning wait is only good while both threads have a core, so each step's work is two
halves a thread claims (compare-and-swap) before doing them; a thread that finished its
half and waited `LATE_NS` for a partner that has not claimed its own takes that half too,
and the following ones until the partner claims again. A late partner thus costs one
`LATE_NS` wait per call, not a time slice per step. Both threads compute a half the same
way, so the results are one thread's bits whatever the timing.

`meeting_source()` gives ``next_half(sync, k, q, nth, st)`` (the half of step k thread q
does next; -1: done), ``half_done``, ``wait_turn`` / ``turn_done`` (a half's work after
its mark, in step order) and ``split_units(hh, q, nth)``; a nonzero ``sync[ABORT]`` ends
every wait, so no thread spins forever after the other failed.
"""
from __future__ import annotations

import numpy as np

from ..runtime import sharepool

__all__ = ["meeting_source", "THREAD_START", "ABORT", "CLAIM", "TAKEN", "WAITED", "TURN", "LATE_NS", "QUANTUM", "new_sync", "threads",
           "run", "counts"]

# A thread's meeting state as a call starts, [absent, took, first]: `thread_state()` in the
# numba source, or an array made from it by a kernel's caller (compiler/cpu/kernels/lstm_kernels.py)
THREAD_START = (0, 0, 1)
ABORT = 8          # sync's abort flag, a cache line away from the counter
CLAIM = 16         # sync[CLAIM + 8 h]: the first step whose half h is not claimed yet (own lines)
TAKEN = 32         # sync[TAKEN]: halves a thread did for its late partner (a count, for tests and stats)
WAITED = 40        # sync[WAITED]: thread 0's longest wait in ns for a step its partner was still at
TURN = 48          # sync[TURN + 8 h]: steps whose work after the meeting (`turn_done`) half h has done
# A waiting thread takes its partner's half when the partner has not begun it this long
# after the wait began (a running partner begins within microseconds; a half is ~70 us).
LATE_NS = 50_000
# Hidden units per thread come in multiples of this: whole register-transpose blocks and
# GEMM panels.
QUANTUM = 16

_SPINS = 2000      # pause instructions (~30-100 ns each) before each sched_yield while the
                   # partner works on a half it claimed (it may share this core)


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
    # libc's sched_yield: let a descheduled partner (or another process) have this core
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
    # step over: the partner was absent if this thread did its half
    st[0] = st[1]
    st[1] = 0
    st[2] = 1
    return -1


@_bnjit(inline='always')
def next_half(sync, k, q, nth, st):
    # The half of step k this thread (q) does next, or -1 once every half of step k is done;
    # st: this thread's `thread_state`. A half is done by the thread that claims it. This
    # thread claims its own half, then waits for the step; a partner that has not claimed its
    # half _BLATE_NS into the wait loses it, and its later halves too until it claims again
    # (the module docstring). Results do not depend on who does a half.
    first = st[2] != 0
    st[2] = 0
    if nth == 1:
        return 0 if first else _step_end(st)
    if first and _cas(sync, _BCLAIM + 8 * q, k, k + 1):
        return q
    p = 1 - q
    target = 2 * (k + 1)
    if _atomic_load(sync, 0) >= target:
        return _step_end(st)
    if st[0] != 0 and _cas(sync, _BCLAIM + 8 * p, k, k + 1):
        _atomic_add(sync, _BTAKEN, 1)
        st[1] = 1
        return p
    start = _now_ns()
    spins = 0
    while _atomic_load(sync, 0) < target:
        if _atomic_load(sync, _BABORT) != 0:
            break
        _spin_pause()
        spins += 1
        if spins % 64 == 0:
            if _atomic_load(sync, _BCLAIM + 8 * p) == k:
                # the partner has not begun its half
                if _now_ns() - start > _BLATE_NS and _cas(sync, _BCLAIM + 8 * p, k, k + 1):
                    _atomic_add(sync, _BTAKEN, 1)
                    st[1] = 1
                    return p
            elif spins >= _BSPINS:
                # the partner is at work on its half: if it shares this core, let it run
                _sched_yield()
                spins = 0
    if q == 0:
        # the launcher's longest wait (sharepool.Partner.waited)
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
    while _atomic_load(sync, _BTURN + 8 * h) < k:
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
    _atomic_add(sync, _BTURN + 8 * h, 1)


@_bnjit(inline='always')
def split_units(hh, q, nth):
    # thread q's hidden units (u0, u1) of hh in whole quanta, the last thread taking the rest
    if nth == 1:
        return 0, hh
    part = hh // nth // SPLIT_Q * SPLIT_Q
    return q * part, (q + 1) * part if q + 1 < nth else hh
'''


def meeting_source() -> str:
    """The meeting's numba source for this CPU (the pause hint and clock id are in the
    source, so the disk cache keys on them)."""
    import time
    return (_MEETING.replace("{abort}", str(ABORT)).replace("{spins}", str(_SPINS))
            .replace("{claim}", str(CLAIM)).replace("{taken}", str(TAKEN)).replace("{late}", str(LATE_NS))
            .replace("{waited}", str(WAITED)).replace("{turn}", str(TURN))
            .replace("{thread_start}", ", ".join(map(str, THREAD_START)))
            .replace("{clock}", str(getattr(time, "CLOCK_MONOTONIC", 1)))   # POSIX (Linux: 1)
            .replace("{quantum}", str(QUANTUM)).replace("{pause}", _pause_name()))


def new_sync() -> np.ndarray:
    """A fresh meeting state for one split call (counter, abort flag, claims, halves taken,
    the launcher's longest wait, the halves' turns)."""
    return np.zeros(TURN + 16, dtype=np.int64)


def threads(hidden: int, quantum: int = QUANTUM) -> int:
    """Threads a layer loop of `hidden` units may split over: 2 where BLAS may use two
    threads (its ceiling, not the load policy's count now: a late partner costs one
    `LATE_NS` wait) and each thread gets at least `quantum` units, else 1 (LSTM LM step:
    96.6 ms against 103.0 unsplit). The policy's count decides while the partner is benched
    (`sharepool.Partner.punctual`), and 1 while we cede a core to a compile worker."""
    if hidden < 2 * quantum or hidden % quantum:
        return 1
    from ..runtime import coreshare
    from ....threads import blas_threads
    policy = coreshare.adapt_blas()         # (also notices a count the user set meanwhile)
    if (coreshare.blas_ceiling() or 1) < 2 or coreshare.ceding():
        return 1     # (ceding: a compile worker of ours has the partner's core, as BLAS's one)
    if sharepool.partner.punctual() or not policy:
        return 2
    # the partner stalled a call lately (descheduled inside a half): the policy decides
    return 2 if (blas_threads() or 1) >= 2 else 1


def _share(kernel, args: tuple, sync, q: int, nth: int) -> None:
    """Share q of a split call."""
    try:
        kernel(*args, q, nth, sync)
    except BaseException:
        sync[ABORT] = 1        # never leave the other share waiting for a half it claimed
        raise


# Split calls made and halves a thread did for its late partner (sync[TAKEN]) in this
# process: how often the partner was late (tests, measurements).
counts = {"split": 0, "taken": 0}


def run(kernel, args: tuple, nth: int) -> None:
    """``kernel(*args, q, nth, sync)`` for q = 0 .. nth-1 at once (nth 1 or 2): q = 0 here,
    q = 1 on the partner thread; ``kernel(*args, 0, 1, sync)`` alone when nth is 1 or
    another launch holds the pool. Once this share returns every half is done, unless a
    share failed (sync[ABORT]), so the partner is not waited for."""
    sync = new_sync()
    if nth < 2 or not sharepool.try_launch():
        kernel(*args, 0, 1, sync)
        return
    try:
        job = sharepool.partner.post(_share, (kernel, args, sync, 1, 2))
        error = None
        try:
            _share(kernel, args, sync, 0, 2)
        except BaseException as exc:
            error = exc
        failed = error is not None or sync[ABORT] != 0
        late = sharepool.partner.finish(job, wait=failed)
    finally:
        sharepool.end_launch()
    if failed:
        raise error or late or RuntimeError("a split loop's share failed")
    sharepool.partner.waited(sync[WAITED] * 1e-9)
    counts["split"] += 1
    counts["taken"] += int(sync[TAKEN])
