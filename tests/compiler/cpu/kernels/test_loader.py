"""The hand-written kernel loader (compiler/cpu/kernels/loader.py): when a kernel is used, when numpy is."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from tracejit.compiler.cpu.kernels import loader as native  # noqa: E402

_SOURCE = '''
from numba import njit


@njit("void(float64[::1])", cache=CACHE)
def kernel(a):
    for i in range(a.shape[0]):
        a[i] += 1.0
'''


def test_sync_mode_loads_on_first_call(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    k = native.NativeKernel(_SOURCE, "test_native_sync")
    fn = k.get()
    assert fn is not None and k.get() is fn
    a = np.zeros(3)
    fn(a)
    assert a.tolist() == [1.0, 1.0, 1.0]


def test_background_mode_never_waits_on_the_first_call(monkeypatch):
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    # however long the machine stalls between the two calls below
    monkeypatch.setattr(native, "_GO_AFTER_S", 1e9)
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 2.0"), "test_native_bg")
    assert k.get() is None and k.thread is None      # first call: numpy, nothing started
    assert k.get() is None and k.thread is None      # within _GO_AFTER_S: still nothing
    monkeypatch.setattr(native, "_GO_AFTER_S", 0.0)
    assert k.get() is None and k.thread is not None  # after it: the loader starts
    k.thread.join(240)
    assert k.get() is not None


def test_a_kernel_first_asked_for_late_starts_at_its_next_call(monkeypatch):
    """The loader waits `_GO_AFTER_S` after the op's first call only while that call came
    within `_GO_AFTER_S` of the process's first ask (numba's import must not compete with
    the first step); a kernel first asked for later (a variant a later step asks for)
    starts at its next call: a second call still tells a recurring op from a one-off."""
    import time
    from tracejit.compiler.cpu.kernels import vectorized
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setattr(native, "_GO_AFTER_S", 5.0)
    monkeypatch.setattr(native, "_first_ask", time.monotonic())   # the process's first ask: now
    early = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 8.0"), "test_native_early")
    assert early.get() is None and early.get() is None and early.thread is None   # waits
    monkeypatch.setattr(native, "_first_ask", time.monotonic() - 6.0)         # 6 s ago
    late = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 16.0"), "test_native_late")
    assert late.get() is None and late.thread is None      # first call: numpy, nothing started
    assert late.get() is None and late.thread is not None  # the next one: the loader starts
    late.thread.join(240)
    a = np.zeros(2)
    late.get()(a)
    assert a.tolist() == [16.0, 16.0]
    assert native.go_now(100.0, 100.1, 5.0) is False   # (first ask at 94 s: 6 s before)
    monkeypatch.setattr(native, "_first_ask", 96.0)
    assert native.go_now(100.0, 100.1, 5.0) is False and native.go_now(101.0, 101.1, 5.0)
    assert native.go_now(100.0, 105.0, 5.0)


def test_coming_while_asked_for_and_not_yet_loaded(monkeypatch):
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setattr(native, "_GO_AFTER_S", 1e9)
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 4.0"), "test_native_coming")
    assert not k.coming()                 # nobody asked for it yet
    assert k.get() is None and k.coming()  # asked for: on its way (numpy meanwhile)
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    assert not k.coming()                 # off: it never comes
    monkeypatch.delenv("TRACEJIT_EAGER_KERNELS")
    k.failed = True
    assert not k.coming()                 # failed: it never comes
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    s = native.NativeKernel(_SOURCE, "test_native_sync")
    assert s.get() is not None and not s.coming()   # sync mode loads it in the call


def test_switched_off_even_when_loaded(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    k = native.NativeKernel(_SOURCE, "test_native_sync")
    assert k.get() is not None
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    assert k.get() is None


def test_load_now_compiles_what_sync_mode_only_loads_from_disk(tmp_path, monkeypatch):
    """A `sync_compiles=False` kernel not on disk: sync mode gives up on it in the call
    (numpy's form), `load_now` compiles it into the cache and loads it, and a fresh loader
    of the same source then finds it on disk."""
    from differential import kernel_cache_at
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    source = _SOURCE.replace("+= 1.0", "+= 8.0")
    with kernel_cache_at(tmp_path):
        k = native.NativeKernel(source, "test_native_load_now", sync_compiles=False)
        assert k.get() is None and k.failed
        assert k.load_now() and k.get() is not None
        a = np.zeros(2)
        k.get()(a)
        assert a.tolist() == [8.0, 8.0]
        again = native.NativeKernel(source, "test_native_load_now", sync_compiles=False)
        assert again.get() is not None
        monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
        off = native.NativeKernel(source, "test_native_load_now", sync_compiles=False)
        assert not off.load_now() and off.fn is None   # switched off: nothing loaded


def test_a_source_that_does_not_build_stays_on_numpy(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    k = native.NativeKernel("this is not python", "test_native_bad")
    assert k.get() is None and k.failed


def test_settle_loads_a_kernel_waiting_for_its_next_call(monkeypatch):
    # A benchmark settles before timing: a kernel whose op ran once (its loader waits for
    # the op's next call) must be started and loaded by `vectorized.settle`, not left on numpy.
    from tracejit.compiler.cpu.kernels import vectorized
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    k = native.kernel(("test_settle", 3.0), lambda: _SOURCE.replace("+= 1.0", "+= 3.0"))
    assert k.get() is None and k.thread is None
    assert vectorized.settle(timeout=240.0)
    fn = k.get()
    assert fn is not None
    a = np.zeros(2)
    fn(a)
    assert a.tolist() == [3.0, 3.0]


def test_pending_names_a_kernel_until_it_loads_and_starts_nothing(monkeypatch):
    # bench_tiers steps a program until nothing is pending: `pending` must name a kernel an
    # op asked for, not start its loader (the op's next call does), and drop it once loaded.
    from tracejit.compiler.cpu.kernels import vectorized
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setattr(native, "_GO_AFTER_S", 0.0)
    k = native.kernel(("test_pending", 7.0), lambda: _SOURCE.replace("+= 1.0", "+= 7.0"))
    assert k.label not in vectorized.pending()      # nobody asked for it yet
    assert k.get() is None                           # asked for (numpy runs the op)
    assert k.label in vectorized.pending() and k.thread is None
    assert k.get() is None and k.thread is not None  # the op's next call starts the loader
    k.thread.join(240)
    assert k.get() is not None and k.label not in vectorized.pending()


def test_pending_since_names_a_kernel_only_if_its_op_asked_since(monkeypatch):
    # bench_tiers waits only for the kernels the compiled step asks for: a kernel asked for
    # before `since` and not again (an op of tier 0 only) is not pending since then.
    import time
    from tracejit.compiler.cpu.kernels import vectorized
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setattr(native, "_GO_AFTER_S", 3600.0)   # asked for, the loader not started
    k = native.kernel(("test_pending_since", 8.0), lambda: _SOURCE.replace("+= 1.0", "+= 8.0"))
    assert k.get() is None
    mark = time.monotonic()
    assert k.label in vectorized.pending() and k.label not in vectorized.pending(mark)
    assert k.get() is None and k.thread is None        # asked for again, still not started
    assert k.label in vectorized.pending(mark)
    assert k.label not in vectorized.pending(time.monotonic() + 1.0)
    native.settle(time.monotonic() + 240)
    assert k.fn is not None and k.label not in vectorized.pending(mark)


def test_the_longest_time_between_two_asks_is_kept(monkeypatch):
    # workers.ASKED_WITHIN_S: a kernel whose op asks seconds apart (a slow step) is not put
    # back behind the others when a worker takes it a while after the op's last ask.
    import time
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setattr(native, "_GO_AFTER_S", 3600.0)   # asked for, the loader not started
    k = native.kernel(("test_gap", 9.0), lambda: _SOURCE.replace("+= 1.0", "+= 9.0"))
    assert k.get() is None and k.gap == 0.0
    time.sleep(0.2)
    assert k.get() is None and k.get() is None
    assert 0.2 <= k.gap < 10.0 and k.last >= k.first + 0.2


def test_background_compile_is_queued_behind_the_switches_kernels(tmp_path, monkeypatch):
    # rank EAGER (compiler/workers.py): numpy runs the op meanwhile, so a background
    # compile's plan kernels and their pairs (rank FIRST) go to the workers first
    from tracejit.compiler import workers
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    asked = []

    def submit(source, label, llvm_options, **kw):
        asked.append(kw)
        job = workers.Job(1, source, label, llvm_options)
        job._finish(False, "not compiled in this test")
        return job
    monkeypatch.setattr(workers, "submit", submit)
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 5.0"), "test_native_rank")
    k.last, k.gap = 12.5, 0.25
    k._prepare()
    assert [kw["rank"] for kw in asked] == [workers.EAGER] and k.failed
    assert asked[0]["asked"]() == (12.5, 0.25)   # the op's latest ask: put back when it is old
    # one a compiled step runs at every call too (the recurrent layers' loops): STEADY
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 6.0"), "test_native_steady", steady=True)
    k._prepare()
    assert [kw["rank"] for kw in asked[1:]] == [workers.STEADY] and k.failed
    # one that few steps gain from and that costs seconds (a GEMM template configuration's module): LATER
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 17.0"), "test_native_later", later=True)
    k._prepare()
    assert [kw["rank"] for kw in asked[2:]] == [workers.LATER] and k.failed


def test_a_convolution_layers_kernels_are_steady_and_cross_entropys_are_not(monkeypatch):
    # A compiled CNN step runs convolution's unfold/fold, BatchNorm, pooling and ReLU's
    # backward kernels at every call, and its speed hangs on them (tier20: the step
    # 18.7 ms with them, 29.0 without, one thread): rank STEADY, ahead of the EAGER ones
    # (the cross-entropy row kernels: per-call overhead on a few short rows).
    import tracejit as tj
    import tracejit.nn.functional as F
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setattr(native, "_GO_AFTER_S", 3600.0)   # asked for, no loader started
    monkeypatch.setattr(native, "_kernels", {})
    from tracejit.compiler.cpu.kernels import channel_forms, window_forms
    monkeypatch.setattr(window_forms, "_calls", {})   # pooling asks again, whatever ran before
    monkeypatch.setattr(channel_forms, "_calls", {})  # as does BatchNorm
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((8, 3, 16, 16)).astype(np.float32), requires_grad=True)
    conv, bn = tj.nn.Conv2d(3, 16, 3, padding=1), tj.nn.BatchNorm2d(16)
    y = F.max_pool2d(F.relu(bn(conv(x))), 2).reshape(8, -1)[:, :10]
    F.cross_entropy(y, tj.tensor(rng.integers(0, 10, 8))).backward()
    steady = {k[:2]: v.steady for k, v in native._kernels.items()}
    # the products' template kernel is asked for only where the GEMM choice picks it; when
    # asked, it is not steady
    assert steady.pop(("gemm", "float32"), False) is False
    # (16-column output rows: the fold's rows form)
    assert steady == {("im2col", "float32"): True, ("col2im_rows", "float32"): True,
                      ("channels", "forward"): True, ("channels", "backward"): True,
                      ("windows", "max_pool2d_with_offsets"): True,
                      ("windows", "max_pool2d_scatter"): True,
                      ("rows", "cross_entropy"): False, ("rows", "cross_entropy_backward"): False}


def _played_pool(tmp_path, monkeypatch):
    """Background mode with a compile pool of no dispatcher threads (nothing compiles: the
    test reads its queue), a private cache, and no loader started by an ask."""
    from tracejit.compiler import workers
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "_GO_AFTER_S", 3600.0)   # asked for, no loader started
    pool = workers.CompilePool(0)
    monkeypatch.setattr(workers, "_pool", pool)
    return pool


def _queued(k):
    """(thread, job): `k`'s loader run in a thread until it has queued its compile job (it
    then waits for the job, which the test finishes)."""
    import threading
    t = threading.Thread(target=k._prepare, daemon=True)
    t.start()
    for _ in range(2000):
        if k.job is not None:
            break
        t.join(0.01)
    return t, k.job


def test_a_kernel_only_tier0_asked_for_queues_later_until_asked_outside(tmp_path, monkeypatch):
    # A compiled function's plan fuses what its tier-0 forward runs, so a hand-written
    # kernel asked for only inside tier-0 forwards may never be asked for again (the MLP
    # step's LayerNorm kernels): rank LATER. An ask from eager code or a compiled plan (the
    # MLP's skinny GEMM) moves its queued job up to EAGER.
    from tracejit.compiler import workers
    from tracejit.compiler.cpu.kernels import vectorized
    pool = _played_pool(tmp_path, monkeypatch)
    other = pool.submit("# other", "other", (), rank=workers.EAGER)
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 19.0"), "test_native_tier0")
    with vectorized.serving_tier0():
        assert k.get() is None
    assert k.outside is False and k._rank() == workers.LATER
    t, job = _queued(k)
    assert job is not None and [item[0] for item in pool.jobs.queue if item[2] is job] == [workers.LATER]
    with vectorized.serving_tier0():
        assert k.get() is None                   # tier 0 again: stays LATER
    assert [item[0] for item in pool.jobs.queue if item[2] is job] == [workers.LATER]
    assert k.get() is None                       # asked outside: up to EAGER, after `other`
    assert k.outside is True and k._rank() == workers.EAGER
    assert [item[2] for item in sorted(pool.jobs.queue)] == [other, job]
    assert [item[0] for item in pool.jobs.queue if item[2] is job] == [workers.EAGER]
    job._finish(False, "not compiled in this test")
    t.join(60)
    assert not t.is_alive() and k.failed
    # a kernel asked for outside from the start queues EAGER at once
    e = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 23.0"), "test_native_outside")
    assert e.get() is None and e.outside is True and e._rank() == workers.EAGER


def test_a_steady_kernel_asked_for_in_a_fused_kernels_stand_in_queues_later(tmp_path, monkeypatch):
    # The CNN's compiled step runs BatchNorm-and-pool as one fused kernel; until that one is
    # in, its stand-in (the composition) asks for BatchNorm's and pooling's own kernels,
    # which tier 0 asked for first. Asked for nowhere else, their jobs go behind the
    # kernels the compiled step keeps asking for (rank LATER): they had taken ~1.2 s of
    # the worker's CPU before the fused kernels, which then made them idle.
    from tracejit.compiler import workers
    from tracejit.compiler.cpu.kernels import vectorized
    pool = _played_pool(tmp_path, monkeypatch)
    fused = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 29.0"), "test_native_fused", steady=True)
    part = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 31.0"), "test_native_part", steady=True)
    with vectorized.serving_tier0():
        assert part.get() is None                # tier 0 asks first: still STEADY
    assert part.outside is False and part._rank() == workers.STEADY
    t, job = _queued(part)
    assert job is not None and [item[0] for item in pool.jobs.queue if item[2] is job] == [workers.STEADY]
    steady = pool.submit("# col2im", "col2im", (), rank=workers.STEADY)
    with native.standing_in(None):               # no fused kernel: asks as it is
        assert not vectorized.standing_in()
    assert fused.get() is None and fused.coming()
    with native.standing_in(fused):
        assert vectorized.standing_in() and not vectorized.outside()
        assert part.get() is None
    assert not vectorized.standing_in() and vectorized.outside()
    assert part.stood_in == [fused] and part.outside is False and part._rank() == workers.LATER
    assert [item[2] for item in sorted(pool.jobs.queue)] == [steady, job]
    assert [item[0] for item in pool.jobs.queue if item[2] is job] == [workers.LATER]
    assert job.asked() == (part.last, part.gap) and part.last is not None
    fused.fn = lambda a: None                    # the fused kernel is in: no stand-in asks again
    last, _ = job.asked()
    assert last == -float("inf") and workers._not_asking(job.asked)   # held at once
    assert part.get() is None                    # asked outside (a plan calls it): STEADY again
    assert part.outside is True and part._rank() == workers.STEADY
    assert job.asked() == (part.last, part.gap) and not workers._not_asking(job.asked)
    assert [item[0] for item in pool.jobs.queue if item[2] is job] == [workers.STEADY]
    job._finish(False, "not compiled in this test")
    t.join(60)
    assert not t.is_alive() and part.failed
    # a fused kernel that failed leaves its composition's asks as they are
    fused.fn, fused.failed = None, True
    with native.standing_in(fused):
        assert not vectorized.standing_in()


_WARM_CHILD = """
import json, sys, threading
from tracejit.compiler.cpu.kernels import loader
loader._GO_AFTER_S = 0.0
before = "numba" in sys.modules
k = loader.NativeKernel(%r, "test_native_warm")
first = k.get()
for t in threading.enumerate():
    if t.name == "tracejit-numba-import":
        t.join(240)
from numba.core.runtime import rtsys
print(json.dumps([before, first is None, "numba" in sys.modules, k.thread is None, k.fn is None,
                  rtsys._init]))
"""


def test_numba_is_imported_on_a_timer_after_the_first_ask_and_no_kernel_loads(tmp_path):
    """The process's first ask schedules numba's import and runtime set-up `_GO_AFTER_S` later
    on a timer of its own (done while a program pauses): the kernel itself still waits for
    its op's next call."""
    env = dict(os.environ, PYTHONPATH=os.getcwd(), TRACEJIT_CACHE_DIR=str(tmp_path))
    env.pop("TRACEJIT_COMPILE", None)
    env.pop("TRACEJIT_EAGER_KERNELS", None)
    r = subprocess.run([sys.executable, "-c", _WARM_CHILD % _SOURCE], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # numba imported and its runtime initialized; the kernel neither loaded nor loading
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [False, True, True, True, True, True]


_LOCKED_CHILD = """
import json, sys, threading, time
from tracejit.compiler import diskcache
from tracejit.compiler.cpu.kernels import loader
loader._GO_AFTER_S = 0.0
k = loader.NativeKernel(%r, "test_native_locked")
with diskcache._lock:                 # a module load under way in another thread
    k.get()
    timer = next(t for t in threading.enumerate() if t.name == "tracejit-numba-import")
    timer.join(1.0)
    during = ["numba" in sys.modules, timer.is_alive()]
timer.join(240)
from numba.core.runtime import rtsys
print(json.dumps(during + ["numba" in sys.modules, timer.is_alive(), rtsys._init]))
"""


def test_the_import_timer_waits_for_a_module_load_under_way():
    """numba's import on the timer takes the loads' lock: imported beside a loader thread's
    own import of numba, Python's import-deadlock check can hand one of them a partially
    initialized numba module and fail that load."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    env.pop("TRACEJIT_COMPILE", None)
    env.pop("TRACEJIT_EAGER_KERNELS", None)
    r = subprocess.run([sys.executable, "-c", _LOCKED_CHILD % _SOURCE], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # held back while the lock is held; numba imported and its runtime set up after
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [False, True, True, False, True]


def test_takes_plain_native_float_arrays_of_one_dtype_only():
    f32, f64 = np.zeros(3, np.float32), np.zeros(3)
    assert native.takes(np, f32, f32) and native.takes(np, f64)
    assert not native.takes(np, f32, f64)                      # mixed dtypes
    assert not native.takes(np, np.zeros(3, ">f4" if np.little_endian else "<f4"))  # swapped
    assert not native.takes(np, np.zeros(3, np.int64)) and not native.takes(np, f32, 1.0)
    assert not native.takes(np) and not native.takes(None, f32)


def test_entry_is_kept_once_loaded_and_serial_ones_by_their_fast_entry(monkeypatch):
    from tracejit.compiler import backends
    cpu = backends.get("cpu")
    monkeypatch.setattr(cpu, "fast_entry", lambda fn: ("fast", fn))
    cache: dict = {}
    loads = []
    state = {"fn": None}

    def get():
        loads.append(1)
        return state["fn"]
    assert native.entry(cache, "k", get) is None and cache == {}    # not loaded: asked again
    state["fn"] = "dispatcher"
    assert native.entry(cache, "k", get) == ("fast", "dispatcher")
    assert native.entry(cache, "k", get) == ("fast", "dispatcher")
    assert len(loads) == 2                                           # kept: not asked again
    assert native.entry(cache, "p", get, serial=False) == "dispatcher"
    assert cache == {"k": ("fast", "dispatcher"), "p": "dispatcher"}
