"""tracejit/compiler/cpu/runtime/sharepool.py: shares of work on the pool's threads, and `split` (a batch of
small BLAS products or kernel rows in parts, each on one BLAS thread) with its users:
blas_gemm.matmul's batched products. The share count is forced
(whatever this machine's cores), so every path runs everywhere."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from tracejit.compiler.cpu.gemm import blas_gemm
from tracejit.compiler.cpu.runtime import coreshare
from tracejit.compiler.cpu.runtime import sharepool
from tracejit.threads import blas_threads


@pytest.fixture
def shares(forced_split):
    return forced_split   # (conftest.py: 3 shares at any size)


def test_split_covers_the_range_once_in_contiguous_parts(shares):
    seen = []
    lock = threading.Lock()

    def part(lo, hi):
        with lock:
            seen.append((lo, hi))
    sharepool.split(part, 30, 1)
    assert shares == [3]
    # 3 shares take PARTS_PER_SHARE * 3 parts in turn
    parts = sorted(seen)
    assert len(parts) == sharepool.PARTS_PER_SHARE * 3
    assert parts[0][0] == 0 and parts[-1][1] == 30
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(parts, parts[1:]))


def test_a_share_that_starts_late_leaves_its_parts_to_the_others(shares):
    # the caller's share runs parts while share 1 is held back: the caller does not wait
    # for share 1 to do "its half"
    gate = threading.Event()
    took = {}
    lock = threading.Lock()

    def part(lo, hi):
        me = threading.get_ident()
        if me != main and not gate.is_set():
            gate.wait(5)
        with lock:
            took.setdefault(me, []).append(lo)
        if me == main and len(took[me]) >= 8:
            gate.set()
    main = threading.get_ident()
    sharepool.split(part, 12, 1)
    assert sorted(lo for los in took.values() for lo in los) == list(range(12))
    assert len(took[main]) >= 8


def test_split_runs_at_once_below_its_work_bound_or_on_one_core(monkeypatch):
    calls = []
    sharepool.split(lambda lo, hi: calls.append((lo, hi)), 10, sharepool.SPLIT_MIN_WORK - 1)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 1)
    sharepool.split(lambda lo, hi: calls.append((lo, hi)), 10, sharepool.SPLIT_MIN_WORK)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 4)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 1)   # a process kept on one BLAS thread
    sharepool.split(lambda lo, hi: calls.append((lo, hi)), 10, sharepool.SPLIT_MIN_WORK)
    assert calls == [(0, 10)] * 3


def test_shares_run_on_one_blas_thread_and_the_count_comes_back(shares):
    before = blas_threads()
    if before is None:
        pytest.skip("no known BLAS (OpenBLAS/MKL) to set")
    counts = []
    sharepool.split(lambda lo, hi: counts.append(blas_threads()), 4, 1)
    assert counts == [1] * 4
    assert blas_threads() == before


def test_a_failing_part_raises_in_the_caller_and_the_pool_still_works(shares):
    def part(lo, hi):
        if lo > 0:
            raise ValueError(f"part {lo}:{hi} failed")
    with pytest.raises(ValueError, match="part .* failed"):
        sharepool.split(part, 6, 1)
    seen = []
    sharepool.split(lambda lo, hi: seen.append(lo), 6, 1)
    assert sorted(seen) == [0, 1, 2, 3, 4, 5]


def test_a_split_inside_a_share_runs_at_once(shares):
    inner = []
    sharepool.split(lambda lo, hi: sharepool.split(lambda a, b: inner.append((lo + a, lo + b)), hi - lo, 1), 6, 1)
    assert shares == [3]
    assert sorted(inner) == [(i, i + 1) for i in range(6)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_products_split_by_batch_match_numpy(shares, dtype):
    rng = np.random.default_rng(0)
    # attention's layout: q and k^T as strided views of one packed projection
    qkv = rng.standard_normal((5, 128, 3, 2, 32)).astype(dtype)   # products of 2^19 m*k*n
    q = qkv[:, :, 0].transpose(0, 2, 1, 3)
    kt = qkv[:, :, 1].transpose(0, 2, 3, 1)
    got = blas_gemm.matmul(q, kt)
    want = np.matmul(q.astype(np.float64), kt.astype(np.float64))
    assert got.dtype == dtype and got.shape == (5, 2, 128, 128)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    assert shares == [3]
    # a broadcast batch or mixed dtypes stay numpy's own call
    blas_gemm.matmul(q, kt[:1])
    blas_gemm.matmul(q.astype(np.float64), kt.astype(np.float32))
    assert shares == [3]


@pytest.fixture
def pair(monkeypatch, partner):
    """`split` on 2 shares at any size, the second on the worker pool's thread."""
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 2)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(sharepool, "SPLIT_MIN_WORK", 0)


def test_two_shares_cover_the_range_on_the_second_thread_with_one_blas_thread(pair):
    main = threading.get_ident()
    before = blas_threads()
    seen, lock = [], threading.Lock()

    def part(lo, hi):
        with lock:
            seen.append((lo, hi, threading.get_ident() == main, threading.current_thread().name,
                         blas_threads()))
    meet = _both_shares(main)

    def slow_part(lo, hi):
        meet()
        part(lo, hi)
    sharepool.split(slow_part, 40, 1)
    parts = sorted(s[:2] for s in seen)
    assert len(parts) == 2 * sharepool.PARTS_PER_SHARE
    assert parts[0][0] == 0 and parts[-1][1] == 40
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    others = {s[3] for s in seen if not s[2]}
    assert others and all(o.startswith("Dummy") for o in others)   # (ctypes' name of a foreign thread)
    if before is not None:
        assert {s[4] for s in seen} == {1} and blas_threads() == before


def _both_shares(main):
    """A part wrapper that holds each share at its first part until the other share has
    taken one too (the caller's parts are quick enough to take them all otherwise)."""
    met = {True: threading.Event(), False: threading.Event()}

    def meet():
        mine = threading.get_ident() == main
        met[mine].set()
        met[not mine].wait(5)
    return meet


def test_a_failing_part_on_either_thread_raises_in_the_caller(pair):
    main = threading.get_ident()
    for fail_on_main in (True, False):
        meet = _both_shares(main)

        def part(lo, hi):
            meet()
            if (threading.get_ident() == main) == fail_on_main:
                raise ValueError(f"part {lo}:{hi} failed")
        with pytest.raises(ValueError, match="part .* failed"):
            sharepool.split(part, 8, 1)
    seen = []
    sharepool.split(lambda lo, hi: seen.append(lo), 8, 1)
    assert sorted(seen) == list(range(8))


def test_batched_products_on_two_shares_match_numpy(pair):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 4, 64, 32)).astype(np.float32)
    b = rng.standard_normal((6, 4, 32, 64)).astype(np.float32)
    got = blas_gemm.matmul(a, b)
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_two_shares_run_on_two_threads(partner):
    seen = {}
    lock = threading.Lock()

    started = threading.Event()

    def share(a, b, t, nt):
        if t == 1:
            started.set()
        else:   # the caller would take share 1 itself if no worker had begun it
            started.wait(30)
        with lock:
            seen[t] = (a, b, nt, threading.get_ident())
    assert sharepool.try_launch()
    try:
        sharepool.run_shares(share, (1, 2), (), 2)
    finally:
        sharepool.end_launch()
    assert sorted(seen) == [0, 1]
    assert all(v[:3] == (1, 2, 2) for v in seen.values())
    assert seen[0][3] == threading.get_ident() and seen[1][3] != seen[0][3]


def test_a_failing_share_is_raised_in_the_caller(partner):
    def share(t, nt):
        if t == 1:
            raise ValueError("share 1 failed")
    assert sharepool.try_launch()
    try:
        with pytest.raises(ValueError, match="share 1 failed"):
            sharepool.run_shares(share, (), (), 2)
        ran = []
        sharepool.run_shares(lambda t, nt: ran.append(t), (), (), 2)     # the partner still works
        assert sorted(ran) == [0, 1]
    finally:
        sharepool.end_launch()


@pytest.mark.parametrize("nt", [1, 2, 3])
def test_launch_runs_every_share_once_or_one_alone_when_the_pool_is_taken(nt):
    seen = []
    lock = threading.Lock()

    def share(a, t, n):
        with lock:
            seen.append((a, t, n))
    assert sharepool.launch(share, ("x",), nt) == nt
    assert sorted(seen) == [("x", t, nt) for t in range(nt)]
    seen.clear()
    assert sharepool.try_launch()          # another launch holds the pool: one share, here
    try:
        assert sharepool.launch(share, ("y",), nt) == 1
    finally:
        sharepool.end_launch()
    assert seen == [("y", 0, 1)]


def test_a_child_forked_during_a_launch_can_launch():
    import os
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    assert sharepool.try_launch()                      # the parent is launching at the fork
    try:
        pid = os.fork()
        if pid == 0:                                   # child: a lock of its own, free
            code = 1
            try:
                code = 0 if sharepool.try_launch() and not sharepool.try_launch() else 1
                sharepool.end_launch()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert not sharepool.try_launch()              # the parent's launch is still its own
    finally:
        sharepool.end_launch()
    assert os.WEXITSTATUS(status) == 0
    assert sharepool.try_launch()
    sharepool.end_launch()


def test_pool_shares_find_answers_a_second_thread_only_after_the_lookup(monkeypatch):
    """Two threads asking at once: the second waits for the first's lookup and gets its
    answer. `found` was set before the lookup, so a second asker got None meanwhile, and
    eager kernels rendered then were OpenMP kernels rather than chunk kernels with a pair
    (codegen_chunks.flat_pairs)."""
    from tracejit.compiler.cpu.runtime import workpool
    inside, release = threading.Event(), threading.Event()
    calls = []

    def slow_pool():
        calls.append(1)
        inside.set()
        release.wait(30)
        raise OSError("no pool here")      # (fn stays None)
    monkeypatch.setattr(workpool, "pool", slow_pool)
    w = sharepool.PoolShares()
    got = {}
    first = threading.Thread(target=lambda: got.setdefault("first", w.find()))
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=lambda: got.setdefault("second", w.find()))
    second.start()
    second.join(0.2)
    assert second.is_alive() and "second" not in got    # waits for the lookup under way
    release.set()
    first.join(30)
    second.join(30)
    assert got == {"first": None, "second": None} and calls == [1] and w.found


def test_warm_holds_for_a_while_after_a_two_thread_job(monkeypatch):
    """`warm`: a two-thread job (`worked`) ended within WARM_S, the pool's worker still
    polling."""
    now = [100.0]
    monkeypatch.setattr(sharepool.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(sharepool, "_warm_until", 0.0)
    assert not sharepool.warm()
    sharepool.worked()
    assert sharepool.warm()
    now[0] += sharepool.WARM_S / 2
    assert sharepool.warm()
    now[0] += sharepool.WARM_S
    assert not sharepool.warm()
