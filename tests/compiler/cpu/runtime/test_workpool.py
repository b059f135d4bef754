"""tracejit's own worker pool: results independent of the thread count, shares a late worker
has not begun run on the caller, a clean exit, fork safety, and the switch that puts it under
the pair launch."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cfunc, types

from tracejit.compiler.cpu.runtime import workpool
from tracejit.compiler.cpu.runtime.voidptr import carray_at

_libc = ctypes.CDLL(None)
_self_id = _libc.pthread_self
_self_id.restype = ctypes.c_ulong
_self_id.argtypes = []


@cfunc(types.void(types.voidptr))
def _share(rec):
    # rec: (q, n, x address, out address, ids address): share q of n sums its stripe of x
    # in a fixed order into out[q] and records the thread that ran it in ids[q]
    r = carray_at(rec, (5,), np.int64)
    q, n = r[0], r[1]
    x = carray_at(r[2], (1000,), np.float64)
    out = carray_at(r[3], (r[1],), np.float64)
    ids = carray_at(r[4], (r[1],), np.int64)
    acc = 0.0
    for i in range(q, 1000, n):
        acc += x[i] * x[i]
    out[q] = acc
    ids[q] = _self_id()


def _launch(p, n, x):
    out = np.zeros(n)
    ids = np.zeros(n, np.int64)
    recs = np.zeros((n, 5), np.int64)
    recs[:, 0] = np.arange(n)
    recs[:, 1] = n
    recs[:, 2] = x.ctypes.data
    recs[:, 3] = out.ctypes.data
    recs[:, 4] = ids.ctypes.data
    p.run(n, ctypes.c_void_p(_share.address), ctypes.c_void_p(recs.ctypes.data), recs.strides[0])   # (ctypes: no GIL)
    return out, ids


def test_every_share_runs_once_with_its_own_record():
    x = np.linspace(-1.0, 2.0, 1000)
    p = workpool.pool()
    for n in (1, 2, 3, 5, 8):
        out, _ = _launch(p, n, x)
        expect = [float(np.sum(x[q::n] ** 2)) for q in range(n)]
        np.testing.assert_allclose(out, expect, rtol=1e-12)
        assert abs(out.sum() - float(np.sum(x * x))) < 1e-9


def test_share_0_on_the_caller_and_share_q_on_the_caller_or_worker_q():
    x = np.ones(1000)
    p = workpool.pool()
    n = p.workers + 1
    me = _self_id()
    owner = {}
    for _ in range(50):
        _, ids = _launch(p, n, x)
        assert ids[0] == me
        for q in range(1, n):
            if ids[q] != me:
                assert owner.setdefault(q, ids[q]) == ids[q]      # one worker per share
    assert len(set(owner.values())) == len(owner)


def test_a_share_no_worker_begins_runs_on_the_caller():
    # a pool whose worker is gone but whose slot is still handed a share: the caller takes
    # the share at the join instead of waiting for a thread that never comes
    code = """
import sys
import numpy as np
sys.path.insert(0, {here!r})
import test_workpool as t
from tracejit.compiler.cpu.runtime import workpool
p = workpool.WorkPool(2)
p.close()
p._nslots.value = 1
x = np.linspace(-1.0, 2.0, 1000)
out, ids = t._launch(p, 2, x)
assert set(ids.tolist()) == {{t._self_id()}}, ids
assert np.allclose(out, [np.sum(x[0::2] ** 2), np.sum(x[1::2] ** 2)]), out
print("ok")
""".format(here=os.path.dirname(__file__))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


_CHILD = """
import numpy as np, sys
sys.path.insert(0, {here!r})
import test_workpool as t
from tracejit.compiler.cpu.runtime import workpool
p = workpool.pool()
assert p.threads == {threads}, p.threads
x = np.linspace(-1.0, 2.0, 1000)
out, ids = t._launch(p, 8, x)
print(repr(out.tolist()), len(set(ids.tolist())))
"""


def _run_child(threads: int, extra: str = "") -> str:
    env = dict(os.environ, TRACEJIT_POOL_THREADS=str(threads))
    code = _CHILD.format(here=os.path.dirname(__file__), threads=threads) + extra
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_forced_thread_counts_give_bitwise_equal_results_and_exit_cleanly():
    outs = {}
    for threads in (1, 2, 4):
        out, distinct = _run_child(threads).split("\n")[0].rsplit(" ", 1)
        outs[threads] = out
        assert 1 <= int(distinct) <= threads      # shares beyond the workers run on the caller
    assert outs[1] == outs[2] == outs[4]


def test_a_forked_child_launches_on_threads_of_its_own():
    p = workpool.pool()
    x = np.linspace(0.0, 1.0, 1000)
    expect, _ = _launch(p, 3, x)
    pid = os.fork()
    if pid == 0:   # the child: the parent's workers are not here
        try:
            out, ids = _launch(workpool.pool(), 3, x)
            ok = np.array_equal(out, expect) and ids[0] == _self_id()
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_bad_thread_count_names_the_switch(monkeypatch):
    monkeypatch.setenv("TRACEJIT_POOL_THREADS", "two")
    with pytest.raises(ValueError, match="TRACEJIT_POOL_THREADS"):
        workpool.threads_allowed()
    monkeypatch.setenv("TRACEJIT_POOL_THREADS", "3")
    assert workpool.threads_allowed() == 3
    monkeypatch.delenv("TRACEJIT_POOL_THREADS")
    assert workpool.threads_allowed() == len(os.sched_getaffinity(0))


def test_pairs_run_on_the_pool():
    code = """
import numpy as np
from tracejit.compiler.cpu.runtime import sharepool, workpool
fn = sharepool.pool_shares.find()
assert fn is workpool.pool().run, fn
seen = []
def share(a, q, n):
    a[q] = q + 10 * n
a = np.zeros(2)
sharepool.pool_shares.run(fn, share, (a,))
print(a.tolist())
"""
    env = dict(os.environ, TRACEJIT_POOL_THREADS="2")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[20.0, 21.0]"


_BLAS_CHILD = """
import hashlib
import numpy as np
from tracejit import threads
from tracejit.compiler.cpu.runtime import sharepool, workpool
if not threads.blas_on_pool():
    print("skip")
    raise SystemExit
threads.set_blas_threads(4)
r = np.random.default_rng(1)
a, b = r.standard_normal((600, 256)).astype(np.float32), r.standard_normal((256, 400)).astype(np.float32)
c = a @ b
inner = []
def share(q, n):      # a threaded product inside a launch that holds the pool
    if q == 1:
        inner.append(a @ b)
fn = sharepool.pool_shares.find()
if fn is not None:
    sharepool.pool_shares.run(fn, share, ())
else:
    inner.append(a @ b)
print(workpool.pool().threads, hashlib.sha1(c.tobytes()).hexdigest(), np.array_equal(inner[0], c))
"""


def test_blas_jobs_give_the_same_bits_on_pools_of_1_2_and_4_threads():
    # OpenBLAS on four threads: on a pool of fewer (or one held by a launch) its jobs run on
    # threads made for the call, since one product's jobs wait for each other
    outs = set()
    for threads in (1, 2, 4):
        env = dict(os.environ, TRACEJIT_POOL_THREADS=str(threads))
        env.pop("TRACEJIT_THREAD_TUNING", None)
        res = subprocess.run([sys.executable, "-c", _BLAS_CHILD], env=env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        if res.stdout.strip() == "skip":
            pytest.skip("numpy's BLAS takes no threads callback")
        n, digest, inner = res.stdout.split()
        assert (int(n), inner) == (threads, "True")
        outs.add(digest)
    assert len(outs) == 1



def test_the_code_the_workers_run_is_never_disposed():
    # Disposing the engine ran its finalizer during interpreter shutdown, which imports:
    # "Exception ignored" at exit, and a hang for good when a daemon thread held an import
    # lock then. The pool detaches it: nothing frees the code while the process lives.
    p = workpool.pool()
    assert p._engine.closed
    x = np.linspace(0.0, 1.0, 1000)
    out, _ = _launch(p, 2, x)      # (launches still run on it)
    assert out.sum() == pytest.approx(float(x @ x))
