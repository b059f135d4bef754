"""Compiled functions called from several threads at once."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tracejit as tj

ROOT = Path(__file__).resolve().parents[2]


def _race(fn, n_threads, make_args):
    barrier = threading.Barrier(n_threads)
    results, errors = [None] * n_threads, []

    def work(i):
        try:
            args = make_args()
            barrier.wait()
            results[i] = fn(*args)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_threads_making_the_same_first_call_share_one_capture():
    def slow_double(x):
        time.sleep(0.05)  # a capture long enough for every thread to miss together
        return x * 2.0

    f = tj.trace(slow_double, compiler="interpret", recompile_limit=8)
    results = _race(f, 8, lambda: (tj.ones(3),))
    for r in results:
        np.testing.assert_allclose(r.numpy(), np.full(3, 2.0))
    st = f.cache_stats()
    assert st["compiles"] == 1 and st["entries"] == 1 and st["eager_fallbacks"] == 0
    assert st["misses"] == 1


def test_threads_with_different_signatures_each_capture_once():
    def double(x):
        time.sleep(0.02)
        return x * 2.0

    f = tj.trace(double, compiler="interpret", dynamic=False)
    sizes = iter([3, 3, 4, 4, 5, 5])
    lock = threading.Lock()

    def make():
        with lock:
            return (tj.ones(next(sizes)),)
    _race(f, 6, make)
    assert f.cache_stats()["compiles"] == 3


_WORKQUEUE_SCRIPT = r"""
import sys, threading
import numpy as np
import tracejit as tj
from tests.differential import kernel_cache_at

with kernel_cache_at(sys.argv[1]):
    def f(x, y):
        return tj.tanh(x * y + 1.0).sum() + (x - y).amax()

    F = tj.trace(f)
    xs = [tj.tensor(np.linspace(-1.0, 1.0, 1 << 16, dtype=np.float32) * (i + 1)) for i in range(4)]
    expect = [float(f(x, x)) for x in xs]
    F(xs[0], xs[0])
    bad = []

    def work(i):
        for _ in range(100):
            r = float(F(xs[i], xs[i]))
            if abs(r - expect[i]) > 1e-3 * abs(expect[i]):
                bad.append(r)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    import numba
    try:
        layer = numba.threading_layer()
    except ValueError:          # no parfor kernel ran (flat kernels paired: compiler/codegen_chunks.py)
        layer = "none"
    print("layer", layer, "bad", len(bad))
"""


@pytest.mark.parametrize("parallel", ["parfor", "auto"])
def test_parallel_kernels_from_threads_under_numba_workqueue(tmp_path, parallel):
    """numba's workqueue layer aborts the process on concurrent parallel launches;
    tracejit serializes its parallel kernels under that layer (item 7). With the default
    (auto), flat kernels may be paired chunk kernels instead (two CPUs and a pthreads
    OpenBLAS): concurrent calls take turns at the pair or run on their own thread."""
    script = tmp_path / "wq.py"
    script.write_text(_WORKQUEUE_SCRIPT)
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", PYTHONPATH=str(ROOT), TRACEJIT_PARALLEL=parallel)
    r = subprocess.run([sys.executable, str(script), str(cache)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    want = "layer workqueue bad 0" if parallel == "parfor" else "bad 0"
    assert want in r.stdout, r.stdout + r.stderr[-2000:]


def test_two_threads_capturing_at_once_keep_their_own_specialized_dims():
    """Tracing state is per thread: a dim one thread's code reads as a Python int is
    specialized in that thread's capture, not in the capture another thread has open."""
    a_in, b_in, a_read = threading.Event(), threading.Event(), threading.Event()

    def scale_by_rows(x):
        a_in.set()
        assert b_in.wait(10)    # B's capture is open while this one reads its size
        n = int(x.shape[0])     # needs the concrete size: the dim must become static
        a_read.set()
        return x * float(n)

    def plus_one(y):
        assert a_in.wait(10)
        b_in.set()
        assert a_read.wait(10)  # keep this capture open until A has read its size
        return y + 1.0

    fa = tj.trace(scale_by_rows, compiler="interpret", dynamic=True)
    fb = tj.trace(plus_one, compiler="interpret", dynamic=True)
    out, errors = {}, []

    def run(key, fn, arg):
        try:
            out[key] = fn(arg)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=("a", fa, tj.ones(4, 2))),
               threading.Thread(target=run, args=("b", fb, tj.ones(3, 2)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    np.testing.assert_allclose(out["a"].numpy(), np.full((4, 2), 4.0))
    np.testing.assert_allclose(out["b"].numpy(), np.full((3, 2), 2.0))
    # A new row count must not reuse A's entry with 4 baked in.
    np.testing.assert_allclose(fa(tj.ones(6, 2)).numpy(), np.full((6, 2), 6.0))
    np.testing.assert_allclose(fb(tj.ones(5, 2)).numpy(), np.full((5, 2), 2.0))
