"""ops/loop_split.py: the per-step meeting of split loop kernels (the threads see each
other's writes after it; a failed partner ends every wait), the runner with either partner
(OpenBLAS's pool worker where numpy's BLAS has one, else a thread of tracejit.sharepool; the fallback to
one thread when the pool is busy), the thread policy, and the hidden-unit split."""
import threading

import numpy as np
import pytest

from tracejit.ops import loop_split

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


@njit
def units(hh, q, nth):
    return split_units(hh, q, nth)
'''
_ns: dict = {}


def _mod() -> dict:
    if not _ns:
        exec(compile(_DRIVERS, "<loop_split drivers>", "exec"), _ns)
    return _ns


def test_threads_see_each_others_writes_after_each_step(partner):
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

    loop_split.run(kernel, (slots, seen, steps), 2)
    assert sorted(calls) == [(0, 2), (1, 2)]          # both halves ran, on two threads
    assert len(threads) == 2
    assert seen.tolist() == [0, 0]                    # no stale value after any step
    assert slots.tolist() == [[steps - 2] * 2, [steps - 1] * 2]


def test_a_failed_partner_ends_the_wait_and_its_error_is_raised(partner):
    ns = _mod()

    def kernel(steps, q, nth, sync):
        if q == 1:
            raise ValueError("partner failed")
        ns["wait_all"](steps, q, nth, sync)            # would wait for q = 1 forever

    with pytest.raises(ValueError, match="partner failed"):
        loop_split.run(kernel, (100,), 2)
    seen = []                                          # the pool is free again afterwards
    loop_split.run(lambda q, nth, sync: seen.append((q, nth)), (), 2)
    assert sorted(seen) == [(0, 2), (1, 2)]


def test_a_busy_pool_means_one_thread():
    from tracejit import sharepool
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


def test_threads_follows_the_blas_count_and_the_layer_size(monkeypatch):
    from tracejit import coreshare, threads
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 0)
    monkeypatch.setattr(threads, "blas_threads", lambda: 2)
    assert loop_split.threads(256) == 2
    assert loop_split.threads(32) == 2
    assert loop_split.threads(16) == 1                 # one quantum: nothing to split
    assert loop_split.threads(40) == 1                 # gate blocks off the panels' and blocks' grid
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)   # the policy (or the user) says one
    assert loop_split.threads(256) == 1
    monkeypatch.setattr(threads, "blas_threads", lambda: None)   # no known BLAS
    assert loop_split.threads(256) == 1


def test_only_a_pthreads_openblas_lends_its_pool():
    """An OpenMP build of OpenBLAS may run both shares of gotoblas_pthread on one thread (the
    first would wait for the second forever), a sequential one has no pool: neither is used."""
    class Lib:
        def __init__(self, parallel):
            self.openblas_get_parallel = lambda: parallel

    assert loop_split._pthreads_build(Lib(1)) is True
    assert loop_split._pthreads_build(Lib(2)) is False      # OpenMP
    assert loop_split._pthreads_build(Lib(0)) is False      # sequential
    assert loop_split._pthreads_build(object()) is False    # cannot tell
