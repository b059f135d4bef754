"""tracejit.compiler.cpu.gemm.router: which kernel or BLAS call runs a product, on how many threads.

The machine's real load is never asserted on: the thread policy's count is faked, and the
BLAS counts each product ran on are checked against what the policy was told."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from tracejit.compiler.cpu.gemm import router
from tracejit.compiler.cpu.runtime import coreshare
from tracejit.threads import blas_threads, set_blas_threads

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


class _NoHalves:
    """compiler/cpu/gemm/halves.py as where its two halves cannot run (one core, no OpenBLAS pool, not
    loaded): the routing tests below are about the products' other paths."""
    @staticmethod
    def product(a, b):
        return None

    @staticmethod
    def expect(dtype):
        return None   # (asked for under one thread's policy: nothing to load here)


@pytest.fixture(autouse=True)
def _no_halves(monkeypatch):
    monkeypatch.setattr(router, "_halves_module", _NoHalves)


@linux
def test_matmul_is_numpy_matmul_and_small_products_use_one_thread(monkeypatch):
    import numpy as np
    if blas_threads() is None:
        pytest.skip("numpy's BLAS is neither OpenBLAS nor MKL here")
    seen = []
    real = np.matmul

    def spy(a, b):
        seen.append(blas_threads())
        return real(a, b)
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(coreshare, "_local", type(coreshare._local)())
    monkeypatch.setattr(coreshare, "_blas", None)
    b0 = blas_threads()
    try:
        set_blas_threads(min(2, b0))
        rng = np.random.default_rng(0)
        # small (64x64x100: 0.4M) and tiny (8x5x3: BLAS keeps it on one thread by itself)
        a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 100), dtype=np.float32)
        c, d = rng.standard_normal((8, 5), dtype=np.float32), rng.standard_normal((5, 3), dtype=np.float32)
        monkeypatch.setattr(np, "matmul", spy)
        out, tiny = router.matmul(a, b), router.matmul(c, d)
        monkeypatch.setattr(np, "matmul", real)
        np.testing.assert_array_equal(out, real(a, b))
        np.testing.assert_array_equal(tiny, real(c, d))
        # the small product ran on one thread; the tiny one was left to BLAS (count untouched)
        assert seen == [1, min(2, b0)]
        assert blas_threads() == min(2, b0)       # and the count came back
    finally:
        set_blas_threads(b0)


@linux
def test_gemm_thread_count_and_ceiling_say_what_matmul_uses(monkeypatch, two_blas_threads):
    """What a profiler records beside a product's time: one thread for a small product while
    the policy holds several, BLAS's count otherwise; the ceiling is the count before adapt."""
    assert coreshare.blas_ceiling() == 2              # nothing adapted yet: BLAS's own count
    coreshare.adapt_blas()
    assert router.gemm_thread_count(64, 1000, 10) == 1
    assert router.gemm_thread_count(8, 5, 3) == 1      # tiny: BLAS's own choice, one
    assert router.gemm_thread_count(256, 1024, 1024) == 2
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)
    coreshare.adapt_blas()                            # a core taken: one thread, ceiling kept
    assert router.gemm_thread_count(256, 1024, 1024) == 1 and coreshare.blas_ceiling() == 2


@linux
def test_matmul_runs_few_rows_on_one_thread_eager_or_compiled(monkeypatch, two_blas_threads):
    """A 64x1000x100 product (few rows, 6.4M) runs on one BLAS thread and a 1000x64x100 one
    on two, from eager matmul and from a plan's alike; a large one on two either way; the
    count is restored after each. (BLAS runs them: the register-tile kernel is declined.)"""
    monkeypatch.setattr(router, "_serial_product", _no_serial_product)
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    seen = []
    real = np.matmul

    class _Np:
        def __getattr__(self, name):
            return getattr(np, name)

        def matmul(self, a, b):
            seen.append(blas_threads())
            return real(a, b)

    monkeypatch.setattr(router, "np", _Np())
    a, b = np.ones((64, 1000), np.float32), np.ones((1000, 100), np.float32)
    tall = np.ones((1000, 64), np.float32), np.ones((64, 100), np.float32)
    big = np.ones((256, 1024), np.float32), np.ones((1024, 1024), np.float32)
    assert np.array_equal(router.matmul(a, b, blas_only=True), real(a, b))
    router.matmul(a, b)
    router.matmul(*tall, blas_only=True)
    router.matmul(*tall)
    router.matmul(*big, blas_only=True)
    assert seen == [1, 1, 2, 2, 2]
    assert blas_threads() == 2
    assert router.gemm_thread_count(64, 1000, 100) == 1
    assert router.gemm_thread_count(1000, 64, 100) == 2


def _no_serial_product(a, b, thin=False):
    """The template's serial entry as where it cannot run."""
    return None


@linux
def test_matmul_gives_one_thread_products_to_the_rows_kernel(monkeypatch, two_blas_threads):
    """Products that run on one thread whatever the policy (few rows, or small) are offered
    to the template's serial entry first, eager or compiled, and its result is returned; a 1000-row
    product only when the policy gives one thread, and never a product past
    FEW_ROWS_GEMM_MNK; products it declines go to numpy."""
    offered = []

    def serial(a, b, thin=False):
        offered.append(a.shape + b.shape[1:])
        return "kernel" if a.shape[0] in (64, 1000) else None
    monkeypatch.setattr(router, "_serial_product", serial)
    a, b = np.ones((64, 1000), np.float32), np.ones((1000, 100), np.float32)
    assert router.matmul(a, b, blas_only=True) == "kernel"
    assert router.matmul(a, b) == "kernel"
    small = np.ones((100, 600), np.float32), np.ones((600, 10), np.float32)     # 0.6M: one thread
    assert np.array_equal(router.matmul(*small), small[0] @ small[1])
    tall = np.ones((1000, 64), np.float32), np.ones((64, 100), np.float32)      # 6.4M, 1000 rows
    assert np.array_equal(router.matmul(*tall), tall[0] @ tall[1])           # two threads: BLAS
    assert offered == [(64, 1000, 100), (64, 1000, 100), (100, 600, 10)]
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)             # the policy gives one
    assert router.matmul(*tall, blas_only=True) == "kernel" and router.matmul(*tall) == "kernel"
    big = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)      # 16.8M
    router.matmul(*big)
    assert offered[3:] == [(1000, 64, 100), (1000, 64, 100)]


@linux
def test_matmul_offers_large_few_row_products_of_a_transposed_b(monkeypatch, two_blas_threads):
    """``x @ w.T`` (an F-contiguous b) of few rows past FEW_ROWS_GEMM_MNK is offered to
    the template's serial entry: up to FEW_ROWS_T_ANY rows whatever the policy, more rows (below
    FEW_ROWS) only when the policy gives one thread; a row-major b of that size is not."""
    offered = []

    def serial(a, b, thin=False):
        offered.append(a.shape[0])
        return "kernel"
    monkeypatch.setattr(router, "_serial_product", serial)
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    k, n = 2048, 4096      # past FEW_ROWS_GEMM_MNK from one row
    w = np.ones((n, k), np.float32)
    few, more = router.FEW_ROWS_T_ANY, router.FEW_ROWS_T_ANY + 1
    assert router.matmul(np.ones((few, k), np.float32), w.T) == "kernel"
    assert router.matmul(np.ones((more, k), np.float32), w.T).shape == (more, n)       # BLAS
    assert router.matmul(np.ones((few, k), np.float32), np.ones((k, n), np.float32)).shape == (few, n)
    assert offered == [few]
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)
    assert router.matmul(np.ones((more, k), np.float32), w.T, blas_only=True) == "kernel"
    rows = coreshare.FEW_ROWS
    assert router.matmul(np.ones((rows, k), np.float32), w.T).shape == (rows, n)       # BLAS
    assert offered == [few, more]


def test_matmul_offers_products_from_4m_to_8m_to_the_halves_first(monkeypatch):
    """Products of HALVES_MNK to below FEW_ROWS_GEMM_MNK multiply-adds (the two-layer step's
    forward and weight gradient) are offered to compiler/cpu/gemm/halves.py before any other path, and its
    result is returned; smaller and larger ones are not offered, nor any while the policy
    gives one thread."""
    offered = []

    class _Halves:
        @staticmethod
        def product(a, b):
            offered.append(a.shape + b.shape[1:])
            return "halves" if a.shape[0] == 64 else None
    monkeypatch.setattr(router, "_halves_module", _Halves)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    a, b = np.ones((64, 1000), np.float32), np.ones((1000, 100), np.float32)
    assert router.matmul(a, b, blas_only=True) == "halves" and router.matmul(a, b) == "halves"
    tall = np.ones((1000, 64), np.float32), np.ones((64, 100), np.float32)
    assert np.array_equal(router.matmul(*tall), tall[0] @ tall[1])             # declined
    router.matmul(np.ones((64, 600), np.float32), np.ones((600, 100), np.float32))      # 3.8M
    router.matmul(np.ones((128, 256), np.float32), np.ones((256, 256), np.float32))     # 8.4M
    assert offered == [(64, 1000, 100), (64, 1000, 100), (1000, 64, 100)]
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)      # the policy gives one
    router.matmul(a, b)
    assert len(offered) == 3
