"""compiler/cpu/kernels/loop_split.py: the per-step meeting of split loop kernels over any
number of shares (the threads see each other's writes after it; a failed share ends every
wait), the runner on the worker pool (shares beyond its threads find their work taken; one
thread when the pool is busy), the launcher's longest wait and the stall bench, the thread
rule, and the hidden-unit split."""
import threading
import time

import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import loop_split

pytest.importorskip("numba", reason="the barrier is numba code")

_DRIVERS = loop_split.meeting_source() + '''
from numba import njit


@njit(nogil=True)
def exchange(slots, seen, steps, q, nth, sync):
    # share h of step k: read every slot of buffer (k - 1) % 2 (the last step's), write k
    # into slot h of buffer k % 2. Shared data is read and written inside a share only: a
    # thread may run ahead past one that has left its share (after the step it may take
    # late shares), but no share of step k + 1 begins before all of step k is written, so
    # the last step's buffer is written again only after this share.
    st = thread_state()
    for k in range(steps):
        half = next_half(sync, k, q, nth, st)
        while half >= 0:
            if k > 0:
                for p in range(nth):
                    if slots[(k - 1) % 2, p] != k - 1:
                        seen[q] += 1
            slots[k % 2, half] = k
            half_done(sync, nth)
            half = next_half(sync, k, q, nth, st)


@njit(nogil=True)
def wait_all(steps, q, nth, sync):
    st = thread_state()
    for k in range(steps):
        half = next_half(sync, k, q, nth, st)
        while half >= 0:
            half_done(sync, nth)
            half = next_half(sync, k, q, nth, st)


@njit(nogil=True)
def hold(steps, hold_ns, q, nth, sync):
    # as wait_all, but thread 1 holds its share of step 0 for hold_ns (as a thread
    # descheduled inside it would)
    st = thread_state()
    for k in range(steps):
        half = next_half(sync, k, q, nth, st)
        while half >= 0:
            if q == 1 and k == 0:
                t0 = _now_ns()
                while _now_ns() - t0 < hold_ns:
                    pass
            half_done(sync, nth)
            half = next_half(sync, k, q, nth, st)


@njit
def units(hh, q, nth):
    return split_units(hh, q, nth)
'''
_ns: dict = {}


def _mod() -> dict:
    if not _ns:
        exec(compile(_DRIVERS, "<loop_split drivers>", "exec"), _ns)
    return _ns


def _started_together(kernel):
    """`kernel` run by loop_split.run's shares once shares 0 and 1 have begun: a share that
    begins only after the others did all the work finds nothing to do, so a test of what
    two threads do makes share 0 wait for share 1 (the pool's first worker)."""
    started = threading.Event()

    def both(*args):
        q = args[-3]
        if q == 1:
            started.set()
        elif q == 0:
            assert started.wait(60)
        kernel(*args)
    return both


@pytest.mark.parametrize("nth", [2, 3, 4])
def test_threads_see_each_others_writes_after_each_step(partner, nth):
    """Any share count, on this machine's threads (shares beyond the pool's threads run
    after share 0 and find every share taken): no stale value after any step."""
    ns = _mod()
    steps = 200
    slots = np.full((2, nth), -1, dtype=np.int64)
    seen = np.zeros(nth, dtype=np.int64)
    calls = []
    threads = set()

    def kernel(*args):
        calls.append(args[-3:-1])
        threads.add(threading.get_native_id())
        ns["exchange"](*args)

    loop_split.run(_started_together(kernel), (slots, seen, steps), nth)
    assert sorted(calls) == [(q, nth) for q in range(nth)]   # every share ran, on two threads at least
    assert len(threads) >= 2
    assert seen.tolist() == [0] * nth
    assert slots.tolist() == [[steps - 2] * nth, [steps - 1] * nth]


def test_a_failed_share_ends_the_wait_and_its_error_is_raised(partner):
    ns = _mod()

    def kernel(steps, q, nth, sync):
        if q == 1:
            raise ValueError("share failed")
        deadline = time.monotonic() + 60
        while sync[loop_split.ABORT] == 0 and time.monotonic() < deadline:
            time.sleep(1e-4)                           # (until share 1 has failed)
        ns["wait_all"](steps, q, nth, sync)            # would wait for q = 1 forever

    with pytest.raises(ValueError, match="share failed"):
        loop_split.run(kernel, (100,), 2)
    seen = []                                          # the pool still works afterwards
    loop_split.run(_started_together(lambda q, nth, sync: seen.append((q, nth))), (), 2)
    assert sorted(seen) == [(0, 2), (1, 2)]


@pytest.mark.parametrize("nth", [2, 4])
def test_shares_that_begin_late_find_their_work_taken(nth):
    """Shares that begin only after share 0 has returned (a thread descheduled for the whole
    call; shares beyond the pool's threads) claim nothing and write nothing: share 0 took
    every one of their shares, LATE_NS into the first step and at once after."""
    ns = _mod()
    steps = 30
    slots = np.full((2, nth), -1, dtype=np.int64)
    seen = np.zeros(nth, dtype=np.int64)
    returned = threading.Event()
    checked = []

    def kernel(*args):
        q, sync = args[-3], args[-1]
        if q == 0:
            ns["exchange"](*args)
            returned.set()
            return
        assert returned.wait(60)
        before = slots.copy()
        ns["exchange"](*args)
        checked.append((slots == before).all() and sync[loop_split.CLAIM + loop_split.STRIDE * q] == steps)

    before = dict(loop_split.counts)
    loop_split.run(kernel, (slots, seen, steps), nth)
    assert checked == [True] * (nth - 1)
    assert seen.tolist() == [0] * nth
    assert slots.tolist() == [[steps - 2] * nth, [steps - 1] * nth]
    assert loop_split.counts["taken"] - before["taken"] == (nth - 1) * steps


def test_a_busy_pool_means_one_thread():
    from tracejit.compiler.cpu.runtime import sharepool
    seen = []
    assert sharepool.try_launch()                      # another launch holds the pool
    try:
        loop_split.run(lambda q, nth, sync: seen.append((q, nth, threading.current_thread())), (), 3)
    finally:
        sharepool.end_launch()
    assert seen == [(0, 1, threading.current_thread())]
    seen.clear()
    loop_split.run(lambda q, nth, sync: seen.append((q, nth)), (), 1)
    assert seen == [(0, 1)]


@pytest.mark.parametrize("hh,nth,parts", [
    (256, 2, [(0, 128), (128, 256)]), (48, 2, [(0, 16), (16, 48)]), (40, 2, [(0, 16), (16, 40)]),
    (48, 3, [(0, 16), (16, 32), (32, 48)]), (64, 3, [(0, 16), (16, 32), (32, 64)]),
    (256, 4, [(0, 64), (64, 128), (128, 192), (192, 256)]), (80, 4, [(0, 16), (16, 32), (32, 48), (48, 80)])])
def test_split_units_are_whole_quanta_and_cover_every_unit(hh, nth, parts):
    ns = _mod()
    assert [tuple(ns["units"](hh, q, nth)) for q in range(nth)] == parts
    assert tuple(ns["units"](hh, 0, 1)) == (0, hh)
    assert all(u0 % loop_split.QUANTUM == 0 for u0, _ in parts)


def test_threads_follows_blas_ceiling_and_the_layer_size(monkeypatch):
    """The loops split into as many shares as BLAS may use threads (its ceiling), whatever
    the load policy gives products now (a late thread costs one LATE_NS wait per call), at
    most one per QUANTUM units."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 0)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)          # the policy's count now
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    assert loop_split.threads(256) == 2
    assert loop_split.threads(32) == 2
    assert loop_split.threads(16) == 1                 # one quantum: nothing to split
    assert loop_split.threads(40) == 1                 # gate blocks off the panels' and blocks' grid
    assert loop_split.threads(256, work=loop_split.MIN_WORK - 1) == 1   # a call too small to launch
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 6)
    assert loop_split.threads(256) == 6
    assert loop_split.threads(48) == 3                 # one share per quantum at most
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 128)
    assert loop_split.threads(1024) == 64
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 1)         # the user says one
    assert loop_split.threads(256) == 1
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: None)      # no known BLAS
    assert loop_split.threads(256) == 1


def test_one_thread_while_a_compile_worker_of_ours_compiles(monkeypatch):
    """While a worker of this process compiles a kernel the program waits for
    (coreshare.ceding), the split loops leave the other core to it; two threads again once
    the worker is done."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 1)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)     # the policy gives one now
    monkeypatch.setattr(loop_split.stalls, "punctual", lambda: True)
    ceding = [False]
    monkeypatch.setattr(coreshare, "ceding", lambda: ceding[0])
    assert loop_split.threads(64) == 2
    ceding[0] = True
    assert loop_split.threads(64) == 1
    ceding[0] = False
    assert loop_split.threads(64) == 2


def test_a_stalled_call_leaves_the_count_to_the_policy(monkeypatch):
    """A launcher that waited long for a share another thread had begun (that thread
    descheduled inside it) benches the extra threads for a while (Stalls.waited): the
    policy's count decides meanwhile."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    p = loop_split.Stalls()
    monkeypatch.setattr(loop_split, "stalls", p)
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 1)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 4)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)
    p.waited(p.STALL_S / 2)                            # a wait for a thread at work
    assert p.punctual() and loop_split.threads(256) == 4
    p.waited(p.STALL_BUDGET_S * 2)                     # a long stall
    assert not p.punctual() and p.stalls == 1
    assert loop_split.threads(256) == 1
    monkeypatch.setattr(threads, "blas_threads", lambda: 3)          # the policy gives three
    assert loop_split.threads(256) == 3
    p.benched_until = 0.0                              # (the bench time over)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)
    assert loop_split.threads(256) == 4


def test_stalls_bench_by_stall_time_and_longer_each_time(monkeypatch):
    p = loop_split.Stalls()
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    assert p.punctual()
    p.waited(p.STALL_S / 10)                           # a wait for a thread at work
    assert p.punctual() and p.stalls == 0
    for _ in range(20):                                # a time-slice stall every 0.1 s:
        p.waited(5e-3)                                 # 5% of the time, under STALL_SHARE
        now[0] += 0.1
        assert p.punctual()
    benches = []
    for _ in range(3):
        p.waited(p.STALL_BUDGET_S * 1.5)               # one long stall
        benches.append(p.benched_until - now[0])
        assert not p.punctual()
        now[0] = p.benched_until                       # the bench over
        assert p.punctual()
    assert benches == [p.BENCH_S, 2 * p.BENCH_S, 4 * p.BENCH_S] and p.stalls == 23
    now[0] += p.STRIKES_RESET_S + 1                    # a long quiet spell: a fresh start
    p.waited(p.STALL_BUDGET_S * 1.5)
    assert p.benched_until - now[0] == p.BENCH_S


def test_the_launchers_longest_wait_is_reported(monkeypatch, partner):
    """The kernel records thread 0's longest wait for a step (sync[WAITED], ns), and the
    runner reports it (`Stalls.waited`): a share that holds its claim 200 ms shows as a
    wait of that order. The hold is long because share 0 polls for the claim with sleeps:
    on a loaded machine it may see the claim tens of ms late, and its wait is the hold
    less that lateness (CI at load 7 saw 8.6 ms of a 20 ms hold)."""
    ns = _mod()
    p = loop_split.Stalls()
    waits = []
    p.waited = waits.append
    monkeypatch.setattr(loop_split, "stalls", p)

    def kernel(steps, hold_ns, q, nth, sync):
        if q == 0:
            deadline = time.monotonic() + 60
            while sync[loop_split.CLAIM + loop_split.STRIDE] == 0 and time.monotonic() < deadline:
                time.sleep(1e-4)                       # (until share 1 has claimed its share)
        ns["hold"](steps, hold_ns, q, nth, sync)
    loop_split.run(kernel, (3, 200_000_000), 2)
    assert len(waits) == 1 and 0.05 < waits[0] < 30
