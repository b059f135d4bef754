"""tracejit.compiler.cpu.runtime.coreshare: thread counts follow the cores other processes leave free.

The machine's real load is never asserted on: counters are faked, and the counts set on
numba and BLAS are checked against what the policy was told."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numba
import pytest

from tracejit.compiler.cpu.runtime import coreshare
from tracejit.threads import blas_threads, set_blas_threads

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_count_for_gives_a_core_up_once_others_use_more_than_half_of_one():
    cs = coreshare.CoreShare(cpus=2, machine=2)
    assert [cs.count_for(o) for o in (0.0, 0.2, 0.45, 0.6, 1.0, 1.6, 7.0)] == [2, 2, 2, 1, 1, 1, 1]
    # a big machine whose other CPUs are busy still leaves our 2
    big = coreshare.CoreShare(cpus=2, machine=64)
    assert big.count_for(40.0) == 2 and big.count_for(62.7) == 1
    four = coreshare.CoreShare(cpus=4, machine=4)
    assert [four.count_for(o) for o in (0.0, 1.0, 2.2, 3.9)] == [4, 3, 2, 1]


def test_sample_reads_counters_once_per_interval(monkeypatch):
    busy, own = [100.0], [10.0]
    monkeypatch.setattr(coreshare, "_busy_seconds", lambda: busy[0])
    monkeypatch.setattr(coreshare, "_own_seconds", lambda: own[0])
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25)
    assert cs.sample(now=1.0) == 0.0 and cs._count == 2         # a baseline, no rate yet
    busy[0], own[0] = 101.5, 10.5            # over 1 s: 1.5 CPU-s busy, 0.5 of them ours
    assert cs.sample(now=1.05) == 0.0         # inside the first interval: not read
    assert cs.sample(now=2.0) == pytest.approx(1.0)
    assert cs._count == 1
    busy[0], own[0] = 102.0, 11.0             # next second: only our own work
    assert cs.sample(now=2.2) == pytest.approx(1.0)   # inside the interval: not read
    assert cs.sample(now=3.0) == pytest.approx(0.0)
    assert cs._count == 2


def test_the_first_count_comes_a_short_interval_after_the_first_reading(monkeypatch):
    # A user's first step can start 0.15-0.2 s after the import's reading: it gets a count
    # (here: others hold 1.3 cores, one thread) instead of every CPU.
    busy, own = [100.0], [10.0]
    monkeypatch.setattr(coreshare, "_busy_seconds", lambda: busy[0])
    monkeypatch.setattr(coreshare, "_own_seconds", lambda: own[0])
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25)
    cs.sample(now=1.0)
    busy[0], own[0] = 100.24, 10.04           # 0.15 s: 0.24 CPU-s busy, 0.04 ours
    assert coreshare.FIRST_INTERVAL <= 0.15
    assert cs.sample(now=1.15) == pytest.approx(1.333, abs=0.01) and cs._count == 1
    busy[0], own[0] = 100.30, 10.30           # then the usual interval again: not read yet
    assert cs.sample(now=1.3) == pytest.approx(1.333, abs=0.01)
    assert cs.sample(now=1.4) == pytest.approx(0.0) and cs._count == 2


def test_reread_counts_the_window_after_it_alone(monkeypatch):
    # A reading made while this process's compile workers ran (others: one core) gives one
    # thread until the next sample; `reread` (vectorized.settle's end, the workers done)
    # reads a fresh window: our own work only, two threads again.
    busy, own = [100.0], [10.0]
    monkeypatch.setattr(coreshare, "_busy_seconds", lambda: busy[0])
    monkeypatch.setattr(coreshare, "_own_seconds", lambda: own[0])

    class Clock:
        t = 1.0
        slept = []

        def monotonic(self):
            return self.t

        def sleep(self, s):
            self.slept.append(s)
            self.t += s
            busy[0] += 2 * s           # both CPUs busy over the window, all of it ours
            own[0] += 2 * s

    clock = Clock()
    monkeypatch.setattr(coreshare, "time", clock)
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25)
    cs.sample()
    clock.t = 2.0
    busy[0], own[0] = 101.5, 10.5             # the workers' second: one core of others
    assert cs.threads() == 1
    clock.t = 2.05
    assert cs.threads() == 1                  # inside the interval: the count holds
    assert cs.reread() == 2 and clock.slept == [coreshare.FIRST_INTERVAL]
    assert cs.others == pytest.approx(0.0)

class _Machine:
    """Fake /proc/stat counters and a clock: others' load follows a rule of the count the
    policy gives (what makes a reading self-fulfilling: a lower-priority process fills the
    core the program leaves idle and yields it when the program wants it)."""

    def __init__(self, monkeypatch, others_for):
        self.t, self.busy, self.own = 1.0, 100.0, 10.0
        self.others_for = others_for
        monkeypatch.setattr(coreshare, "_busy_seconds", lambda: self.busy)
        monkeypatch.setattr(coreshare, "_own_seconds", lambda: self.own)

    def run(self, cs, until: float, dt: float = 0.01) -> list:
        """Advance to `until` in steps of `dt`, asking the count at each step as a program's
        launches do; returns (time, count) of every step."""
        seen = []
        while self.t < until - 1e-9:
            cs.sample(now=self.t)
            n = cs._count
            seen.append((round(self.t, 3), n))
            self.busy += self.others_for(n) * dt
            self.t += dt
        return seen


def _yielder(n):
    return 0.8 if n == 1 else 0.1    # fills the idle core, gives it back to two threads


def test_a_core_others_fill_only_while_we_leave_it_idle_is_taken_back(monkeypatch):
    m = _Machine(monkeypatch, lambda n: 0.8)   # a compile or a competitor: one thread
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25, workers=lambda: 0)
    m.run(cs, 1.5)                             # (the first count: a reading at 1.1)
    assert cs._count == 1 and cs.trials == 0
    m.others_for = _yielder                    # now only a process that yields to us
    seen = m.run(cs, 6.0)
    assert cs.trials == 1 and cs.trials_kept == 1
    back = min(t for t, n in seen if n == 2)
    assert back <= 1.1 + coreshare.TRIAL_BACKOFF_MIN + 0.25 + 0.01   # the first trial
    assert all(n == 2 for t, n in seen if t > back)                  # and it stays
    assert cs.others == pytest.approx(0.1, abs=0.05)


def test_a_competing_process_keeps_one_thread_and_the_trials_back_off(monkeypatch):
    m = _Machine(monkeypatch, lambda n: 1.0)   # at our priority: takes its core whatever we do
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25, workers=lambda: 0)
    seen = m.run(cs, 60.0)
    starts = [t for (t, n), (_, before) in zip(seen[1:], seen) if n == 2 and before == 1]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    # each trial one window; then twice as long a wait, up to TRIAL_BACKOFF_MAX
    want = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert len(gaps) >= len(want)
    for g, w in zip(gaps, want):
        assert w + coreshare.TRIAL_WINDOW - 1e-6 <= g <= w + coreshare.TRIAL_WINDOW + 0.26
    assert cs.trials_kept == 0
    at_two = sum(1 for t, n in seen if n == 2) / len(seen)
    assert at_two < 0.02       # ~0.1 s of two threads per 8 s once backed off
    assert seen[-1][1] == 1


def test_no_trial_while_our_compile_workers_work_and_one_right_after(monkeypatch):
    running = [1]
    m = _Machine(monkeypatch, lambda n: 1.0)   # our worker compiling: a core of others
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25, workers=lambda: running[0])
    seen = m.run(cs, 20.0)
    assert cs.trials == 0 and all(n == 1 for t, n in seen if t >= 1.2)
    running[0] = 0                             # the last kernel is in: the worker idles,
    m.others_for = _yielder                    # a lower-priority process fills the core
    seen = m.run(cs, 22.0)
    back = min(t for t, n in seen if n == 2)
    assert back <= 20.0 + 0.25 + 0.01          # the first reading after the workers stop
    assert cs.trials == 1 and cs.trials_kept == 1 and seen[-1][1] == 2


def test_a_trial_that_finds_others_gone_resets_the_backoff(monkeypatch):
    m = _Machine(monkeypatch, lambda n: 1.0)
    cs = coreshare.CoreShare(cpus=2, machine=2, interval=0.25, workers=lambda: 0)
    m.run(cs, 20.0)                            # five trials, each failed: backed off
    assert cs.trials == 5 and cs._backoff == coreshare.TRIAL_BACKOFF_MAX
    m.others_for = _yielder
    m.run(cs, 27.0)                            # the next trial (by 25.75) keeps two threads
    assert cs.trials_kept == 1 and cs._count == 2
    assert cs._backoff == coreshare.TRIAL_BACKOFF_MIN
    m.others_for = lambda n: 1.0               # a competitor again: one thread, tried after 0.5 s
    seen = m.run(cs, 28.5)
    drop = min(t for t, n in seen if n == 1)
    again = min(t for t, n in seen if n == 2 and t > drop)
    assert again - drop <= coreshare.TRIAL_BACKOFF_MIN + 0.25 + 0.01


@linux
def test_sample_of_the_real_machine_is_a_number_of_cores():
    cs = coreshare.CoreShare(interval=0.0)
    cs.sample()
    x = sum(range(200_000))                   # some time passes
    assert x > 0
    assert 0.0 <= cs.sample() <= cs.machine
    assert 1 <= cs.threads() <= cs.cpus


@linux
def test_adapt_sets_numba_and_blas_and_respects_a_count_set_by_others(monkeypatch):
    if blas_threads() is None:
        pytest.skip("numpy's BLAS is neither OpenBLAS nor MKL here")
    monkeypatch.setattr(coreshare, "ENABLED", True)
    top = min(2, numba.config.NUMBA_NUM_THREADS)
    n0, b0 = numba.get_num_threads(), blas_threads()
    counts = iter([2, 1, 1, 2])
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: next(counts))
    monkeypatch.setattr(coreshare, "_local", type(coreshare._local)())
    monkeypatch.setattr(coreshare, "_blas", None)
    try:
        numba.set_num_threads(top)
        set_blas_threads(top)
        assert coreshare.adapt() == 2
        assert numba.get_num_threads() == top and blas_threads() == top
        assert coreshare.adapt() == 1         # a core taken by others: one thread each
        assert numba.get_num_threads() == 1 and blas_threads() == 1
        numba.set_num_threads(1)
        set_blas_threads(1)
        assert coreshare.adapt() == 1         # same count: nothing read or set
        if top == 2:
            coreshare._local.n = None         # (as if the count had changed in between)
            coreshare.core_share.threads = lambda: 1
            numba.set_num_threads(2)          # someone else raises numba's count
            assert coreshare.adapt() == 1     # ... the policy still says 1 ...
            assert numba.get_num_threads() == 1
        counts2 = iter([2])
        coreshare.core_share.threads = lambda: next(counts2)
        assert coreshare.adapt() == 2         # free again: back to the ceilings
        assert numba.get_num_threads() == top and blas_threads() == top
    finally:
        numba.set_num_threads(n0)
        set_blas_threads(b0)


def test_small_products_run_on_one_blas_thread():
    assert coreshare.one_thread_always(64, 1000, 10) is True
    assert coreshare.one_thread_always(256, 1024, 10) is False
    assert coreshare.one_thread_always(256, 1024, 1024) is False
    # few rows below FEW_ROWS_GEMM_MNK (the two-layer step's forward, 64x1000x100) on one;
    # its weight gradient's product (1000 rows), or few rows of a larger product, on two
    assert coreshare.one_thread_always(64, 1000, 100) is True
    assert coreshare.one_thread_always(127, 1000, 16) is True
    assert coreshare.one_thread_always(128, 1000, 16) is False
    assert coreshare.one_thread_always(1000, 64, 100) is False
    assert coreshare.one_thread_always(64, 1000, 1000) is False


def test_parallel_kernels_adapt_unless_switched_off():
    def kernel(a):
        return a + 1
    kernel.signatures = ["sig"]
    wrapped = coreshare.guard_parallel(kernel)
    if coreshare.ENABLED and not coreshare.workqueue_active():
        assert wrapped is not kernel and wrapped.unguarded is kernel
        assert wrapped.signatures == ["sig"]  # the kernel's own attributes show through
    assert wrapped(1) == 2
    code = ("import os; from tracejit.compiler.cpu.runtime import coreshare\n"
            "k = lambda a: a\n"
            "print(coreshare.ENABLED, coreshare.adapt(), coreshare.guard_parallel(k) is k "
            "or coreshare.workqueue_active())\n")
    env = dict(os.environ, TRACEJIT_ADAPTIVE_THREADS="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", "0", "True"]


@linux
def test_gemm_threads_gives_a_small_product_one_thread_then_restores(two_blas_threads):
    """The block the recurrent layers' loop kernels call BLAS in: the same policy as matmul
    (one thread for a small product, the count back afterwards; a large product keeps it)."""
    with coreshare.gemm_threads(32, 256, 32):
        assert blas_threads() == 1
    assert blas_threads() == 2
    with coreshare.gemm_threads(1024, 1024, 1024):
        assert blas_threads() == 2
    assert blas_threads() == 2


def test_an_error_turns_the_policy_off_once_and_never_fails_the_caller(monkeypatch):
    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare, "_local", type(coreshare._local)())
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)

    def broken(n):
        raise OSError("no such library")
    monkeypatch.setattr(coreshare, "_apply", broken)
    with pytest.warns(RuntimeWarning, match="adaptive thread counts turned off.*no such library"):
        assert coreshare.adapt() == 0
    assert coreshare.ENABLED is False
    assert coreshare.adapt() == 0             # off: no second warning, nothing tried


@linux
def test_eager_matmul_adapts_blas_only_without_numba():
    """Eager products take the BLAS count from the machine (`adapt_blas`) but never
    import numba or start its thread pool (0.5 s on the first eager product)."""
    code = ("import sys, numpy as np, tracejit as tj\n"
            "from tracejit.compiler.cpu.runtime import coreshare\n"
            "a = tj.tensor(np.arange(64 * 64, dtype=np.float32).reshape(64, 64))\n"
            "ok = np.allclose((a @ a).numpy(), a.numpy() @ a.numpy())\n"
            "print(ok, 'numba' in sys.modules, coreshare._blas_n is not None or not coreshare.ENABLED)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120, check=True).stdout.split()
    assert out == ["True", "False", "True"]


# A compiled LSTM language model's tier-0 steps while a background thread imports the compile
# workers' module: each of that thread's imports of a tracejit module is held for a while
# between the module's entry in sys.modules and its code (the window in which it has no
# names yet), and the thread policy is made to give one thread (a loaded machine: large
# products claim rows with the partner thread and ask `ceding`).
_SLOW_IMPORT_STEPS = '''
import importlib.abc, importlib.machinery, sys, threading, time
held = []        # tracejit modules a background thread is importing now (held)
during = [0]     # steps run while one was held


class Held(importlib.abc.Loader):
    def __init__(self, inner, name):
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        held.append(self.name)
        time.sleep(0.6)                  # in sys.modules, empty
        try:
            self.inner.exec_module(module)
        finally:
            held.remove(self.name)


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if not name.startswith("tracejit.") or threading.current_thread() is threading.main_thread():
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = Held(spec.loader, name)
        return spec


sys.meta_path.insert(0, Finder())
import numpy as np
import tracejit as tj
from tracejit import nn
from tracejit.compiler.cpu.runtime import coreshare
coreshare.core_share.threads = lambda: 1
coreshare.blas_ceiling = lambda: 2
tj.manual_seed(0)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 128)
        self.rnn = nn.LSTM(128, 256, num_layers=2, batch_first=True)
        self.out = nn.Linear(256, 64)

    def forward(self, x):
        return self.out(self.rnn(self.emb(x))[0])


model = LM()
opt = tj.optim.Adam(model.parameters(), lr=1e-3)
loss_of = tj.script(lambda x, y: nn.functional.cross_entropy(model(x).reshape(-1, 64), y.reshape(-1)))
rng = np.random.default_rng(0)
deadline = time.monotonic() + 120
while during[0] < 20 or held:
    assert time.monotonic() < deadline, "no background import was seen"
    x, y = (tj.tensor(rng.integers(0, 64, (32, 32))) for _ in range(2))
    opt.zero_grad()
    loss = loss_of(x, y)
    loss.backward()
    opt.step()
    during[0] += bool(held)
print("steps during background imports", during[0], float(loss))
'''


@pytest.mark.slow   # a soak: trains from a cold cache until 20 steps ran during imports (~22 s)
def test_tier0_steps_while_a_thread_imports_the_workers_module(tmp_path):
    """The policy reads the compile workers' counters only once their module gave them to it
    (`watch_compiles`): it never looks a module up, so one that another thread is still
    importing (in sys.modules without its names) is never read."""
    env = dict(os.environ, TRACEJIT_COMPILE="background", TRACEJIT_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", _SLOW_IMPORT_STEPS], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "steps during background imports" in out.stdout


# ---------------------------------------------------------------- GIL switches
@pytest.fixture
def interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def test_nested_and_concurrent_blocks_restore_the_interval_after_the_last(interval):
    with coreshare.shorter_switches():
        assert sys.getswitchinterval() == pytest.approx(coreshare.SWITCH_S)
        inside, go, done = threading.Event(), threading.Event(), threading.Event()

        def other():
            with coreshare.shorter_switches():
                inside.set()
                go.wait(10)
            done.set()
        t = threading.Thread(target=other)
        t.start()
        assert inside.wait(10)
        with coreshare.shorter_switches():
            pass
        assert sys.getswitchinterval() == pytest.approx(coreshare.SWITCH_S)
    # The other thread's block still runs: the interval stays short until it ends.
    assert sys.getswitchinterval() == pytest.approx(coreshare.SWITCH_S)
    go.set()
    assert done.wait(10)
    t.join()
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_a_value_set_meanwhile_or_already_short_is_left_alone(interval):
    with coreshare.shorter_switches():
        sys.setswitchinterval(0.002)       # the user's own choice, made inside the block
    assert sys.getswitchinterval() == pytest.approx(0.002)
    sys.setswitchinterval(0.0001)          # already shorter than ours: untouched
    with coreshare.shorter_switches():
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    assert sys.getswitchinterval() == pytest.approx(0.0001)


def test_a_forked_child_forgets_the_parents_blocks(interval):
    with coreshare.shorter_switches():
        coreshare._switches_after_fork()    # what os.fork's child hook runs
        assert sys.getswitchinterval() == pytest.approx(0.005)
        assert coreshare._switch_users == 0
    assert coreshare._switch_users == 0            # a block from before the fork ends: no underflow
    with coreshare.shorter_switches():      # and later blocks work as before
        assert sys.getswitchinterval() == pytest.approx(coreshare.SWITCH_S)
    assert sys.getswitchinterval() == pytest.approx(0.005)
