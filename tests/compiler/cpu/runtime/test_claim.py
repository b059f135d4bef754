"""tracejit/compiler/cpu/runtime/claim.py: chunk indices handed out once each, from threads at once."""
from __future__ import annotations

import threading

import numpy as np
from numba import njit

from tracejit.compiler.cpu.runtime.claim import arrive, claim


@njit(nogil=True)
def _take_all(counter, n, seen):
    # claim until none is left, marking each index claimed
    while True:
        c = claim(counter)
        if c >= n:
            return
        seen[c] += 1


def test_claim_returns_the_count_before_adding_one():
    counter = np.array([5], np.int64)
    seen = np.zeros(9, np.int64)
    _take_all(counter, 9, seen)
    assert seen.tolist() == [0] * 5 + [1] * 4 and counter[0] == 10


def test_threads_claiming_at_once_take_every_index_exactly_once():
    n = 200_000
    counter = np.zeros(1, np.int64)
    seen = [np.zeros(n, np.int64) for _ in range(3)]
    threads = [threading.Thread(target=_take_all, args=(counter, n, s)) for s in seen]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    total = sum(seen)
    assert (total == 1).all()
    assert counter[0] == n + 3     # each thread's last claim found nothing


@njit(nogil=True)
def _write_then_arrive(counter, slot, value, slots, out):
    # each thread writes its slot, then counts itself out; the last one sums every slot
    slots[slot] = value
    if arrive(counter) == slots.shape[0] - 1:
        s = 0
        for k in range(slots.shape[0]):
            s += slots[k]
        out[0] = s
        out[1] += 1


def test_arrive_counts_and_the_last_arriver_sees_every_write():
    for _ in range(50):
        counter = np.zeros(1, np.int64)
        slots = np.zeros(4, np.int64)
        out = np.zeros(2, np.int64)
        threads = [threading.Thread(target=_write_then_arrive, args=(counter, k, k + 10, slots, out))
                   for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert counter[0] == 4 and out.tolist() == [10 + 11 + 12 + 13, 1]
