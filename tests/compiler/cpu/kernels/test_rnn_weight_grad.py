"""A recurrent layer's hidden weight gradient in blocks of steps alongside its backward loop
(tracejit/compiler/cpu/kernels/rnn_weight_grad.py): the blocks cover the loop once, their sum is the one-GEMM
gradient, and the result has the same bits whoever computed which block (any number of
shares, more than the pool's threads, a busy pool, none); a failing loop raises without
hanging."""
import threading

import numpy as np
import pytest

from tracejit.compiler.cpu.runtime import sharepool
from tracejit.ops import lstm_prim
from tracejit.compiler.cpu.kernels import recurrent_layers
from tracejit.compiler.cpu.kernels import loop_split
from tracejit.compiler.cpu.kernels import rnn_weight_grad as R


@pytest.mark.parametrize("L", list(range(1, 20)) + [64, 100])
def test_blocks_cover_the_loop_once_in_order(L):
    bl = R.blocks(L)
    assert bl[0][0] == 0 and bl[-1][1] == L
    assert all(u1 > u0 for u0, u1 in bl)
    assert all(a[1] == b[0] for a, b in zip(bl, bl[1:]))


def test_blocks_shrink_towards_the_loops_end():
    assert R.blocks(64) == [(0, 24), (24, 40), (40, 52), (52, 60), (60, 64)]


def _operands(L, N, H, reverse, seed=0):
    r = np.random.default_rng(seed)
    G2 = r.standard_normal((L * N, 4 * H))
    Z = r.standard_normal((L, 6 * H, N))
    h0 = r.standard_normal((H, N))
    return G2, Z, h0


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("L", [1, 2, 7, 64])
def test_block_sums_equal_the_one_gemm_gradient(reverse, L):
    N, H = 3, 5
    G2, Z, h0 = _operands(L, N, H, reverse)
    want = lstm_prim.hidden_weight_grad(np, G2, Z, h0, list(lstm_prim._order(L, reverse)))
    got = np.zeros((4 * H, H))
    for u0, u1 in R.blocks(L):
        part = np.empty((4 * H, H))
        t0, t1 = R._times(L, u0, u1, reverse)
        R.block_product(G2, Z, h0, t0, t1, reverse, part)
        got += part
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _fake_loop(G2, sync, L, N, reverse, hold=None):
    """A backward loop standing in for the kernel: writes unit r's step of G2 (from a hidden
    copy), then counts the unit in sync[0] as half_done does."""
    full = G2.copy()
    G2[:] = np.nan

    def loop():
        for r in range(L + 1):
            if r < L:
                t = r if reverse else L - 1 - r
                G2[t * N:(t + 1) * N] = full[t * N:(t + 1) * N]
            sync[0] += 1
            if hold is not None and r == L // 2:
                hold()
    return loop


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shares", [2, 3, 6, "busy pool"])
def test_the_same_bits_whoever_does_the_blocks(reverse, shares):
    L, N, H = 64, 4, 8
    G2, Z, h0 = _operands(L, N, H, reverse, seed=1)
    want = np.empty((4 * H, H))
    sync = np.zeros(48, np.int64)
    R.weight_grad_alongside(_fake_loop(G2.copy(), sync, L, N, reverse), sync, G2, Z, h0, reverse, want, 1)
    got = np.empty((4 * H, H))
    sync = np.zeros(48, np.int64)
    g = G2.copy()
    busy = shares == "busy pool"
    if busy:
        assert sharepool.try_launch()      # another launch holds the pool: every block here
    try:
        R.weight_grad_alongside(_fake_loop(g, sync, L, N, reverse), sync, g, Z, h0, reverse, got,
                                2 if busy else shares)
    finally:
        if busy:
            sharepool.end_launch()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, lstm_prim.hidden_weight_grad(np, G2, Z, h0, list(lstm_prim._order(L, reverse))),
                               rtol=1e-12, atol=1e-12)


def test_blocks_go_to_the_pools_threads_while_the_loop_runs(partner):
    """With two shares the pool's worker multiplies blocks while the loop still runs."""
    L, N, H = 64, 4, 8
    G2, Z, h0 = _operands(L, N, H, False, seed=4)
    sync = np.zeros(48, np.int64)
    where = []
    real = R.block_product

    def noted(G2_, Z_, h0_, t0, t1, reverse, out):
        where.append((threading.current_thread() is threading.main_thread(), int(sync[0])))
        real(G2_, Z_, h0_, t0, t1, reverse, out)
    loop = _fake_loop(G2, sync, L, N, False, hold=lambda: _until(lambda: any(not m for m, _ in where)))
    try:
        R.block_product = noted
        R.weight_grad_alongside(loop, sync, G2, Z, h0, False, np.empty((4 * H, H)), 2)
    finally:
        R.block_product = real
    assert any(not main and done < L for main, done in where)   # a worker's block before the loop ended


def _until(cond, timeout=30.0):
    import time
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(1e-4)


def test_a_failing_loop_raises_and_frees_the_pool():
    L, N, H = 16, 2, 4
    G2, Z, h0 = _operands(L, N, H, False)
    sync = np.zeros(48, np.int64)

    def loop():
        sync[0] += 1
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        R.weight_grad_alongside(loop, sync, G2, Z, h0, False, np.empty((4 * H, H)), 3)
    assert sharepool.try_launch()          # the pool is free again
    sharepool.end_launch()


@pytest.mark.parametrize("setting,ceiling,policy,nth,in_loop,want", [
    ("policy", 2, 1, 2, False, True),   # two threads may run, the load policy gives BLAS one now
    ("policy", 2, 1, 1, False, True),   # ... and the extra threads are benched (the split loops stalled)
    ("policy", 2, 1, 2, True, False),   # ... but the split loop computes d W itself: split
    ("policy", 2, 1, 1, True, True),    # ... unless the extra threads are benched
    ("policy", 2, 2, 2, False, False),  # quiet: the split loop
    ("policy", 1, 1, 1, False, False),  # one thread only: the loop alone, d W after it
    ("policy", 1, 1, 1, True, False),   # ... or in it
    (True, 2, 2, 2, False, True), (True, 2, 2, 2, True, True), (True, 2, 2, 1, False, False),
    (False, 2, 1, 2, False, False)])
def test_when_the_weight_gradient_runs_alongside(monkeypatch, setting, ceiling, policy, nth, in_loop, want):
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(recurrent_layers, "OVERLAP_WEIGHT_GRAD", setting)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: ceiling)
    monkeypatch.setattr(threads, "blas_threads", lambda: policy)
    assert recurrent_layers._alongside(nth, in_loop) is want
    if setting == "policy":            # a d W too small to launch: never alongside
        assert recurrent_layers._alongside(nth, in_loop, work=loop_split.MIN_WORK - 1) is False


def test_no_second_thread_while_a_compile_worker_of_ours_compiles(monkeypatch):
    """While a worker of this process compiles a kernel the program waits for
    (coreshare.ceding), the recurrent loops leave the other core to it: the split loop
    runs on one thread and d W goes in the loop (not alongside on the pool), as where
    BLAS may use one thread only; the same choices as before once the worker is done."""
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    from tracejit.compiler.cpu.kernels import loop_split
    monkeypatch.setattr(recurrent_layers, "OVERLAP_WEIGHT_GRAD", "policy")
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 1)
    monkeypatch.setattr(threads, "blas_threads", lambda: 1)     # the policy gives one now
    monkeypatch.setattr(loop_split.stalls, "punctual", lambda: True)
    ceding = [False]
    monkeypatch.setattr(coreshare, "ceding", lambda: ceding[0])
    assert loop_split.threads(64) == 2
    assert recurrent_layers._alongside(1, False) is True and recurrent_layers._alongside(2, True) is False
    ceding[0] = True
    assert loop_split.threads(64) == 1
    assert recurrent_layers._alongside(1, False) is False and recurrent_layers._alongside(1, True) is False
    ceding[0] = False
    assert loop_split.threads(64) == 2 and recurrent_layers._alongside(1, False) is True


def _reference_and_a_fresh_loop(seed, L=64, N=4, H=8):
    """dW of a forward layer's operands computed on one thread (the reference), and a
    fresh loop (with its own sync and G2) to run the same gradient again."""
    G2, Z, h0 = _operands(L, N, H, False, seed=seed)
    want = np.empty((4 * H, H))
    sync = np.zeros(48, np.int64)
    R.weight_grad_alongside(_fake_loop(G2.copy(), sync, L, N, False), sync, G2, Z, h0, False, want, 1)
    sync = np.zeros(48, np.int64)
    g = G2.copy()
    return Z, h0, want, sync, g, _fake_loop(g, sync, L, N, False)


def test_the_caller_waits_for_a_workers_last_fold(partner):
    """A worker finishes the last block and is still adding blocks into out (np.add lets
    go of the GIL) when the caller's loop ends: the caller waits for that fold before it
    hands out back."""
    Z, h0, want, sync, g, loop = _reference_and_a_fresh_loop(seed=3)
    nb = len(R.blocks(Z.shape[0]))
    in_last_add = threading.Event()
    adds = []

    class SlowAdd:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def add(*a, **kw):
            if threading.current_thread() is not threading.main_thread():
                adds.append(1)
                if len(adds) == nb - 1:      # the fold of the last block
                    in_last_add.set()
                    threading.Event().wait(0.3)
            return np.add(*a, **kw)
    got = np.empty_like(want)

    def loop_until_a_worker_folds_the_last_block():
        loop()
        assert in_last_add.wait(30)
    real = R.np
    try:
        R.np = SlowAdd()
        R.weight_grad_alongside(loop_until_a_worker_folds_the_last_block, sync, g, Z, h0, False,
                                got, 2)
    finally:
        R.np = real
    np.testing.assert_array_equal(got, want)
