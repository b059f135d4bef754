"""compiler/cpu/kernels/loop_split.py: the per-step meeting of split loop kernels (the threads see each
other's writes after it; a failed partner ends every wait), the runner on sharepool's partner
thread (not waited for when it has not begun; a late one writes nothing; the fallback to one
thread when the pool is busy), the launcher's longest wait and the partner's bench, the thread
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
    # half h of step k: read both slots of buffer (k - 1) % 2 (the last step's), write k
    # into slot h of buffer k % 2. Shared data is read and written inside a half only: a
    # thread may run ahead past a partner that has left its half (after the step it may
    # take the partner's halves), but no half of step k + 1 begins before all of step k
    # is written, so the last step's buffer is written again only after this half.
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
    # as wait_all, but thread 1 holds its half of step 0 for hold_ns (as a thread
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
    """`kernel` run by loop_split.run's shares once both have begun: a partner that begins
    only after the other share did all the work is not waited for (and may not run at all),
    so a test of what two threads do makes share 0 wait for share 1."""
    started = threading.Event()

    def both(*args):
        q = args[-3]
        if q == 1:
            started.set()
        else:
            assert started.wait(60)
        kernel(*args)
    return both


def test_threads_see_each_others_writes_after_each_step():
    ns = _mod()
    steps = 200
    slots = np.full((2, 2), -1, dtype=np.int64)
    seen = np.zeros(2, dtype=np.int64)
    calls = []
    threads = set()

    def kernel(*args):
        calls.append(args[-3:-1])
        threads.add(threading.get_native_id())
        ns["exchange"](*args)

    loop_split.run(_started_together(kernel), (slots, seen, steps), 2)
    assert sorted(calls) == [(0, 2), (1, 2)]          # both halves ran, on two threads
    assert len(threads) == 2
    assert seen.tolist() == [0, 0]                    # no stale value after any step
    assert slots.tolist() == [[steps - 2] * 2, [steps - 1] * 2]


def test_a_failed_partner_ends_the_wait_and_its_error_is_raised():
    ns = _mod()

    def kernel(steps, q, nth, sync):
        if q == 1:
            raise ValueError("partner failed")
        deadline = time.monotonic() + 60
        while sync[loop_split.ABORT] == 0 and time.monotonic() < deadline:
            time.sleep(1e-4)                           # (until the partner has failed)
        ns["wait_all"](steps, q, nth, sync)            # would wait for q = 1 forever

    with pytest.raises(ValueError, match="partner failed"):
        loop_split.run(kernel, (100,), 2)
    seen = []                                          # the partner still works afterwards
    loop_split.run(_started_together(lambda q, nth, sync: seen.append((q, nth))), (), 2)
    assert sorted(seen) == [(0, 2), (1, 2)]


def test_a_partner_that_has_not_begun_is_not_waited_for_and_never_runs():
    """The launcher's share did every half (the partner's taken after LATE_NS): run returns
    without waiting for the partner thread, whose job is dropped unrun when it had not begun."""
    from tracejit.compiler.cpu.runtime import sharepool
    ns = _mod()
    ran = []
    gate = threading.Lock()
    gate.acquire()
    sharepool.partner.post(gate.acquire, ())           # the partner is held in an earlier job
    try:
        loop_split.run(lambda *a: (ran.append(a[-3]), ns["wait_all"](*a)), (50,), 2)
        assert ran == [0]
    finally:
        gate.release()
    done = threading.Event()                           # the partner is free again: the job
    sharepool.partner.post(done.set, ())               # after ours ran, ours was dropped
    assert done.wait(60)
    assert ran == [0]


def test_a_partner_that_began_late_finds_the_halves_taken():
    """A partner that begins after the launcher has returned claims nothing and writes
    nothing: it finds every half taken and exits."""
    ns = _mod()
    steps = 30
    slots = np.full((2, 2), -1, dtype=np.int64)
    seen = np.zeros(2, dtype=np.int64)
    began, returned, exited = threading.Event(), threading.Event(), threading.Event()

    def kernel(*args):
        q = args[-3]
        if q == 1:
            began.set()                                # (a job begun is not dropped)
            assert returned.wait(60)
            before = slots.copy()
            ns["exchange"](*args)
            assert (slots == before).all() and args[-1][loop_split.CLAIM + 8] == steps
            exited.set()
        else:
            assert began.wait(60)
            ns["exchange"](*args)

    loop_split.run(kernel, (slots, seen, steps), 2)
    returned.set()
    assert exited.wait(60)
    assert seen.tolist() == [0, 0]
    assert slots.tolist() == [[steps - 2] * 2, [steps - 1] * 2]


def test_a_busy_pool_means_one_thread():
    from tracejit.compiler.cpu.runtime import sharepool
    seen = []
    assert sharepool.try_launch()                      # another launch holds the pool
    try:
        loop_split.run(lambda q, nth, sync: seen.append((q, nth, threading.current_thread())), (), 2)
    finally:
        sharepool.end_launch()
    assert seen == [(0, 1, threading.current_thread())]
    seen.clear()
    loop_split.run(lambda q, nth, sync: seen.append((q, nth)), (), 1)
    assert seen == [(0, 1)]


@pytest.mark.parametrize("hh,parts", [(256, [(0, 128), (128, 256)]), (48, [(0, 16), (16, 48)]),
                                      (40, [(0, 16), (16, 40)])])
def test_split_units_are_whole_quanta_and_cover_every_unit(hh, parts):
    ns = _mod()
    assert [tuple(ns["units"](hh, q, 2)) for q in range(2)] == parts
    assert tuple(ns["units"](hh, 0, 1)) == (0, hh)
    assert all(u0 % loop_split.QUANTUM == 0 for u0, _ in parts)


def test_threads_follows_blas_ceiling_and_the_layer_size(monkeypatch):
    """The loops split wherever BLAS may use two threads (its ceiling), whatever the load
    policy gives products now: a partner other processes keep off its core costs one
    LATE_NS wait per call (its halves are taken) and is not waited for at the end."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 0)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)          # the policy's count now
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    assert loop_split.threads(256) == 2
    assert loop_split.threads(32) == 2
    assert loop_split.threads(16) == 1                 # one quantum: nothing to split
    assert loop_split.threads(40) == 1                 # gate blocks off the panels' and blocks' grid
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 1)         # the user says one
    assert loop_split.threads(256) == 1
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: None)      # no known BLAS
    assert loop_split.threads(256) == 1


def test_a_partner_that_stalled_a_call_leaves_the_count_to_the_policy(monkeypatch):
    """A launcher that waited long for a half its partner had begun (the partner descheduled
    inside it) benches the partner for a while (sharepool.Partner.waited): the policy's
    count decides meanwhile."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    from tracejit.compiler.cpu.runtime import sharepool
    p = sharepool.Partner()
    monkeypatch.setattr(sharepool, "partner", p)
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 1)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)
    p.waited(p.STALL_S / 2)                            # a wait of a partner at work
    assert p.punctual() and loop_split.threads(256) == 2
    p.waited(p.STALL_BUDGET_S * 2)                     # a long stall
    assert not p.punctual() and p.stalls == 1
    assert loop_split.threads(256) == 1
    monkeypatch.setattr(threads, "blas_threads", lambda: 2)          # the policy gives two
    assert loop_split.threads(256) == 2
    p.benched_until = 0.0                              # (the bench time over)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)
    assert loop_split.threads(256) == 2


def test_the_launchers_longest_wait_is_reported(monkeypatch):
    """The kernel records thread 0's longest wait for a step (sync[WAITED], ns), and the
    runner reports it to the partner (`Partner.waited`): a partner that holds its claimed
    half 200 ms shows as a wait of that order. The hold is long because share 0 polls for
    the claim with sleeps: on a loaded machine it may see the claim tens of ms late, and
    its wait is the hold less that lateness (CI at load 7 saw 8.6 ms of a 20 ms hold)."""
    from tracejit.compiler.cpu.runtime import sharepool
    ns = _mod()
    p = sharepool.Partner()
    waits = []
    p.waited = waits.append
    monkeypatch.setattr(sharepool, "partner", p)

    def kernel(steps, hold_ns, q, nth, sync):
        if q == 0:
            deadline = time.monotonic() + 60
            while sync[loop_split.CLAIM + 8] == 0 and time.monotonic() < deadline:
                time.sleep(1e-4)                       # (until the partner has claimed its half)
        ns["hold"](steps, hold_ns, q, nth, sync)
    loop_split.run(kernel, (3, 200_000_000), 2)
    assert len(waits) == 1 and 0.05 < waits[0] < 30
