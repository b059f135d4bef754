"""Shared test setup: the tests directory on sys.path (for ``from opdb import OPS``) and
a fixed seed per test. PyTorch is an optional reference: tests that compare with it
import it themselves and skip cleanly when it is missing."""
from __future__ import annotations

import os
import sys
from collections import Counter

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The suite's workers and the Python processes its tests start import tracejit (70k lines)
# and the test modules many times over: with bytecode caches off (PYTHONDONTWRITEBYTECODE)
# each import compiles them again, about 1 s of CPU a process. The suite writes its own.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Tests that assert compiled kernels need them at the first call: the suite compiles in sync
# mode; tests of background compilation (tests/compiler/test_tiers.py) ask for it explicitly.
os.environ["TRACEJIT_COMPILE"] = "sync"
# Nor does a test's process leave workers finishing its kernels after it exits (the tests of
# that, tests/compiler/test_finish.py and test_tiers_warm.py, turn it back on per process).
os.environ["TRACEJIT_COMPILE_FINISH"] = "0"

import tracejit as tj  # noqa: E402
from launches import count_launches  # noqa: E402


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core this process may use, at most four (each worker holds
    its own compiled kernels, 1-2 GB, and more workers than that mostly wait on the disk
    cache and on each other's threads)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    """Modules marked ``long`` (a few tests of tens of seconds each) first, then the others by
    number of tests, largest first: xdist hands whole modules out in this order
    (``--dist loadfile --no-loadscope-reorder``), so the long ones start at once instead of
    running alone at the end while the other workers wait."""
    count = Counter(map(_module, items))
    long = {_module(it) for it in items if it.get_closest_marker("long")}
    items.sort(key=lambda it: (_module(it) not in long, -count[_module(it)]))   # stable


@pytest.fixture(autouse=True)
def _seed_and_restore():
    """Every test starts from the same RNG state, grad mode on, float32 default, and no
    dims learned dynamic by (or captures shared with) another test's compiled modules."""
    from tracejit.jit.capture import _LEARNED
    from tracejit.jit.function import SIBLINGS
    _LEARNED.clear()
    SIBLINGS.clear()
    tj.manual_seed(0)
    prev = tj.get_default_dtype()
    with tj.enable_grad():
        yield
    tj.set_default_dtype(prev)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def float64_with_torch():
    """float64 as the default dtype of both tracejit and PyTorch for the test (module tests
    that compare with PyTorch at float64; the caller has imported torch or skipped)."""
    import torch
    old_t, old_j = torch.get_default_dtype(), tj.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    tj.set_default_dtype(tj.float64)
    yield
    torch.set_default_dtype(old_t)
    tj.set_default_dtype(old_j)


@pytest.fixture
def forced_split(monkeypatch):
    """tracejit/compiler/cpu/runtime/sharepool.py's `split` on 3 shares at any size, whatever this machine's
    cores (so the split paths run everywhere); returns the share counts launched."""
    from tracejit.compiler.cpu.runtime import coreshare
    from tracejit.compiler.cpu.runtime import sharepool
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 3)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 3)
    monkeypatch.setattr(sharepool, "SPLIT_MIN_WORK", 0)
    return count_launches(monkeypatch, sharepool)


@pytest.fixture
def two_blas_threads(monkeypatch):
    """BLAS on 2 threads with the thread policy on and the machine free (coreshare's state
    fresh); BLAS's count back afterwards."""
    from tracejit.compiler.cpu.runtime import coreshare
    from tracejit.threads import blas_threads, set_blas_threads
    if blas_threads() is None:
        pytest.skip("numpy's BLAS is neither OpenBLAS nor MKL here")
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(coreshare, "_blas", None)
    monkeypatch.setattr(coreshare, "_blas_n", None)
    b0 = blas_threads()
    try:
        set_blas_threads(2)
        if blas_threads() != 2:
            pytest.skip("this BLAS runs one thread at most here")
        yield
    finally:
        set_blas_threads(b0)


@pytest.fixture
def thread_counts_back():
    """`tracejit.set_num_threads`'s ceiling and numba's and BLAS's thread counts as found,
    back after the test (a count set in a test would otherwise cap every later test)."""
    import numba
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare
    ceiling, numba_n, blas_n = threads._set[0], numba.get_num_threads(), threads.blas_threads()
    yield
    threads._set[0] = ceiling
    numba.set_num_threads(numba_n)
    if blas_n:
        threads.set_blas_threads(blas_n)
    coreshare.user_set()


@pytest.fixture
def partner():
    """The partner of a two-share launch (sharepool's `run_shares`): the worker pool's thread
    (workpool.py); skips where there is no pool of two threads."""
    from tracejit.compiler.cpu.runtime import sharepool
    if sharepool.pool_shares.find() is None:
        pytest.skip("no worker pool of two threads here")


def _session_tmp(tmp_path_factory):
    """The session's temporary directory, one for all of its xdist workers (each worker's
    basetemp is a `popen-gwN` folder of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="module")
def kernels_in_session_tmp(tmp_path_factory):
    """Compiled kernels of a module's tests in one disk cache under the session's temporary
    directory (not the user's cache), empty when the session starts: for modules whose
    tests need kernels new to the disk cache. A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")``."""
    from differential import kernel_cache_at
    with kernel_cache_at(_session_tmp(tmp_path_factory) / "tracejit-kernels"):
        yield


@pytest.fixture(scope="module")
def kernels_in_test_cache(tmp_path_factory):
    """Compiled kernels of a module's tests in a disk cache kept between runs: `tests/` under
    the cache root (TRACEJIT_CACHE_DIR's or the user's), apart from the user's own kernels.
    For modules that compare values only: a kernel compiled once serves every later run
    until its source or tracejit's changes (the cache key holds both); with the disk cache
    off or unusable, the session's temporary one. A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")``."""
    from tracejit.compiler import cacheroot
    from differential import kernel_cache_at
    root = cacheroot.root()   # made first, private: the cache's own checks of it hold
    path = os.path.join(root, "tests") if root else _session_tmp(tmp_path_factory) / "tracejit-kernels"
    with kernel_cache_at(path):
        yield


@pytest.fixture(params=["mkl", "dot", "words", "float32"])
def bf16_gemm_way(request):
    """Every way of the bf16 GEMM this CPU runs (MKL's runs without bf16 units too)."""
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    if request.param == "mkl" and bf16_gemm.mkl_gemm() is None:
        pytest.skip("MKL (the optional mkl package) is not installed")
    if request.param == "dot":
        if not bf16_gemm.dot_runs():
            pytest.skip("no avx512_bf16 here: the dot way's packing and choice are tested without it")
        from tracejit.compiler.cpu.gemm import choice
        choose = choice.choose     # (every bf16 product on the kernel, as if measured faster)
        request.getfixturevalue("monkeypatch").setattr(
            choice, "choose", lambda key: choice.DOT if key.dtype == "uint16" else choose(key))
    prev = bf16_gemm.force(request.param)
    yield request.param
    bf16_gemm.force(prev)
