"""Tiered execution (compiler/tiers.py, workers.py): tier 0 at once, kernels compiled in
worker processes, the switch, wait(), fault handling, fork and exit hygiene.

The suite runs in sync mode (tests/conftest.py); these tests ask for background mode per
function (``compile="background"``). Each test's function has its own constant, so its
kernel source is new to the module's temporary disk cache and really goes to a worker.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import tiers, workers
from tracejit.compiler import prepare
from differential import kernel_cache_at

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAIT_S = 240  # generous: the machine may be shared


@pytest.fixture(autouse=True, scope="module")
def _module_cache(tmp_path_factory):
    with kernel_cache_at(tmp_path_factory.mktemp("tiers-kernels")):
        yield
    workers.shutdown()


@pytest.fixture
def fresh_pool(monkeypatch):
    """Workers started inside the test (they read the fault-injection env at start)."""
    workers.shutdown()
    yield monkeypatch
    workers.shutdown()


def _step(c):
    def step(x, w):
        return ((x @ w).tanh() * c + x.sum(1, keepdim=True)).pow(2).mean()
    return step


def _args(seed=0):
    rng = np.random.default_rng(seed)
    x = tj.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    w = tj.tensor(rng.standard_normal((8, 8)).astype(np.float32), requires_grad=True)
    return x, w


@pytest.fixture
def in_process_compiles(monkeypatch):
    """A list that gets the thread name and call stack of every module compiled in this
    process from now on (diskcache's "compiles" counter), after the background work that
    earlier tests left running has finished: what a failing count names."""
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.kernels import loader, vectorized
    import traceback
    gc.collect()                # (other tests' dead functions' failed entries with them)
    assert tj.compiler.wait(timeout=WAIT_S)
    assert vectorized.settle(WAIT_S) and loader.settle(time.monotonic() + WAIT_S)
    seen: list = []

    class Recording(dict):
        def __setitem__(self, key, value):
            if key == "compiles":
                seen.append(threading.current_thread().name + "\n"
                            + "".join(traceback.format_stack(limit=12)))
            super().__setitem__(key, value)
    monkeypatch.setattr(diskcache, "_stats", Recording(diskcache.stats()))
    return seen


def _loss_and_grad(fn, x, w):
    w.grad = None
    loss = fn(x, w)
    loss.backward()
    return float(loss), w.grad.numpy().copy()


def test_tier0_equals_eager_then_switches_to_compiled():
    step = _step(1.25)
    f = tj.trace(step, compile="background")
    x, w = _args()
    eager = _loss_and_grad(step, x, w)
    first = _loss_and_grad(f, x, w)
    st = f.cache_stats()
    # (planning: its kernels are not known yet; pending: known and compiling)
    assert st["tiers"] == ["tier0"] and st["planning"] + st["pending_kernels"] >= 1
    assert first[0] == pytest.approx(eager[0], rel=1e-6)
    np.testing.assert_allclose(first[1], eager[1], rtol=1e-6, atol=1e-7)
    assert "tier 0" in f.explain(x, w)["tier"]
    assert tj.compiler.wait(f, timeout=WAIT_S)
    st = f.cache_stats()
    assert st["tiers"] == ["compiled"] and st["pending_kernels"] == 0 and st["planning"] == 0
    assert st["kernels_done"] >= 1
    after = _loss_and_grad(f, x, w)
    assert after[0] == pytest.approx(eager[0], rel=1e-5)
    np.testing.assert_allclose(after[1], eager[1], rtol=1e-4, atol=1e-5)
    assert f.explain(x, w)["tier"].startswith("compiled kernels")


def test_sync_option_compiles_at_the_first_call(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    f = tj.trace(_step(1.5), compile="sync")
    x, w = _args()
    _loss_and_grad(f, x, w)
    assert f.cache_stats()["tiers"] == ["compiled"]
    with pytest.raises(ValueError, match="compile="):
        tj.trace(_step(1.0), compile="later")


def test_env_selects_background(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    f = tj.trace(lambda x: (x * 3.25).exp())
    f(tj.ones(4))
    assert f.cache_stats()["tiers"] == ["tier0"]
    assert tj.compiler.wait(timeout=WAIT_S)  # every pending function
    assert f.cache_stats()["tiers"] == ["compiled"]


def test_compile_ahead_without_running():
    calls = []

    def step(x, w):
        calls.append(1)  # runs while capturing (on tracers), never for real
        return ((x @ w).sigmoid() * 1.75).sum()
    f = tj.trace(step, compile="background")
    x, w = _args(1)
    f.compile(x, w)
    st = f.cache_stats()
    assert st["tiers"] == ["compiled"] and st["hits"] == 0 and len(calls) == 1
    assert float(f(x, w)) == pytest.approx(float(step(x, w)), rel=1e-5)


def test_threads_see_consistent_results_while_it_switches():
    step = _step(2.125)
    f = tj.trace(step, compile="background")
    x, w = _args(2)
    with tj.no_grad():
        expect = float(step(x, w))
        assert float(f(x, w)) == pytest.approx(expect, rel=1e-6)  # tier 0; kernels now pending
        errors = []

        def worker():
            for _ in range(200):
                with tj.no_grad():  # grad mode is per thread
                    got = float(f(x, w))
                if abs(got - expect) > 1e-5 * abs(expect):
                    errors.append(got)
                if f.cache_stats()["tiers"] == ["compiled"]:
                    return
        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        assert tj.compiler.wait(f, timeout=WAIT_S)
        for t in threads:
            t.join()
        assert errors == [] and f.cache_stats()["tiers"] == ["compiled"]


@pytest.mark.parametrize("fault", ["crash", "hang", "error"])
def test_failed_worker_leaves_tier0_with_one_warning(fresh_pool, fault):
    fresh_pool.setenv("TRACEJIT_COMPILE_WORKER_FAULT", fault)
    if fault == "hang":
        fresh_pool.setenv("TRACEJIT_COMPILE_TIMEOUT", "3")
    c = {"crash": 3.0625, "hang": 3.125, "error": 3.1875}[fault]
    step = _step(c)
    f = tj.trace(step, compile="background")
    x, w = _args(3)
    eager = _loss_and_grad(step, x, w)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        _loss_and_grad(f, x, w)
        assert not tj.compiler.wait(f, timeout=WAIT_S)   # it stays on tier 0: False ...
        for _ in range(3):
            got = _loss_and_grad(f, x, w)
        assert not tj.compiler.wait(f, timeout=WAIT_S)   # ... every time, said once
        assert not tj.compiler.wait(timeout=WAIT_S)      # ... to a wait for every function too
    ours = [r for r in rec if "background compile" in str(r.message)]
    assert len(ours) == 1, [str(r.message) for r in rec]
    assert {"crash": "crashed", "hang": "hung", "error": "injected"}[fault] in str(ours[0].message)
    assert f.cache_stats()["tiers"] == ["tier0"]
    assert got[0] == pytest.approx(eager[0], rel=1e-6)
    np.testing.assert_allclose(got[1], eager[1], rtol=1e-6, atol=1e-7)
    pids = workers.worker_pids()
    assert all(_alive(p) for p in pids)  # a crashed or hung worker is gone, not a zombie
    f.reset()                            # its entries forgotten: no failure left to report
    gc.collect()                         # (other tests' dead functions' entries with them)
    assert tj.compiler.wait(timeout=WAIT_S)


def test_corrupt_entry_is_caught_and_rebuilt_in_process(fresh_pool, caplog):
    fresh_pool.setenv("TRACEJIT_COMPILE_WORKER_FAULT", "corrupt")
    step = _step(3.25)
    f = tj.trace(step, compile="background")
    x, w = _args(4)
    eager = _loss_and_grad(step, x, w)
    _loss_and_grad(f, x, w)
    assert tj.compiler.wait(f, timeout=WAIT_S)
    assert f.cache_stats()["tiers"] == ["compiled"]
    assert any("corrupt entry" in r.getMessage() for r in caplog.records)
    got = _loss_and_grad(f, x, w)
    assert got[0] == pytest.approx(eager[0], rel=1e-5)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import tracejit as tj
    from tracejit.compiler import workers
    how = sys.argv[1]
    f = tj.trace(lambda x: (x * {c!r}).tanh().sum(), compile="background")
    x = tj.tensor(np.linspace(-1, 1, 64).astype(np.float32))
    f(x)
    for _ in range(600):  # until the workers have started
        if workers.worker_pids():
            break
        time.sleep(0.05)
    print("PIDS", *workers.worker_pids(), flush=True)
    if how == "fork":
        pid = os.fork()
        if pid == 0:  # the child: its own pool; the parent's job is resubmitted here
            ok = tj.compiler.wait(f, timeout={wait}) and f.cache_stats()["tiers"] == ["compiled"]
            ok = ok and abs(float(f(x)) - float(np.tanh(x.numpy() * {c!r}).sum())) < 1e-4
            print("CHILD", ok, *workers.worker_pids(), flush=True)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("FORKED", status, flush=True)
    elif how == "sigint":
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    elif how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.parametrize("how", ["fork", "sigint", "sigkill"])  # fork's parent then exits normally
def test_no_worker_outlives_the_program(tmp_path, how):
    c = {"fork": 1.0625, "sigint": 1.1875, "sigkill": 1.25}[how]
    env = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(tmp_path / "kernels"))
    env.pop("TRACEJIT_COMPILE_WORKER_FAULT", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(c=c, wait=WAIT_S), how], env=env,
                          capture_output=True, text=True, timeout=WAIT_S + 60)
    lines = {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.splitlines() if ln.strip()}
    pids = [int(p) for p in lines["PIDS"]]
    assert pids, proc.stdout + proc.stderr
    if how == "fork":
        assert lines["CHILD"][0] == "True" and lines["FORKED"] == ["0"], proc.stdout + proc.stderr
        pids += [int(p) for p in lines["CHILD"][1:]]
    deadline = time.monotonic() + 15  # the watchdog polls every 0.5 s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if _alive(p)]


def test_mode_resolution(monkeypatch):
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    assert prepare.compile_mode(None) == "background"
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    assert prepare.compile_mode(None) == "sync" and prepare.compile_mode("background") == "background"


def test_cache_cli_info_prune_clear(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(tmp_path / "c"))
    build = ("import numpy as np, tracejit as tj\n"
             "tj.trace(lambda x: (x * 1.5).exp(), compile='sync')(tj.ones(4))\n"
             "tj.trace(lambda x: (x * 2.5).exp(), compile='sync')(tj.ones(4))\n"
             "tj.trace(lambda x: (x * 3.5).exp(), compile='sync')(tj.ones(4))\n")
    subprocess.run([sys.executable, "-c", build], env=env, check=True, timeout=WAIT_S)

    def cli(*a):
        return subprocess.run([sys.executable, "-m", "tracejit", "cache", *a], env=env, check=True,
                              capture_output=True, text=True, timeout=120).stdout
    out = cli("info")
    assert "entries: 3" in out and "numba" in out
    assert "removed 0 entries" in cli("prune", "--max-mb", "1000")
    # Least recently used first: make the entries' last use 1, 2, 3 and cap at the newest two.
    from tracejit.compiler import cachetool
    entries = sorted(cachetool._entries(tmp_path / "c"), key=lambda e: str(e[0]))
    for k, (path, *_) in enumerate(entries):
        os.utime(path, (1000 + k, 1000 + k))
    cap = (entries[1][1] + entries[2][1]) / 2 ** 20
    assert cachetool.prune(cap, root=tmp_path / "c")["removed"] == 1
    assert not entries[0][0].exists() and entries[1][0].exists() and entries[2][0].exists()
    assert "removed 2 entries" in cli("clear") and "entries: 0" in cli("info")


def test_fused_adam_runs_the_array_path_until_its_kernel_is_built(monkeypatch):
    import numba  # noqa: F401  (fused=None uses the kernel once numba is loaded)
    import time
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.kernels import loader
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    monkeypatch.setattr(loader, "_kernels", {})
    monkeypatch.setattr(diskcache, "_memory", {})  # as in a fresh process
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(1 << 15).astype(np.float32)
    pa, pb = tj.tensor(w0.copy(), requires_grad=True), tj.tensor(w0.copy(), requires_grad=True)
    opt_a, opt_b = tj.optim.Adam([pa], lr=0.01), tj.optim.Adam([pb], lr=0.01, fused=False)

    def step():
        for p, opt in ((pa, opt_a), (pb, opt_b)):
            opt.zero_grad()
            (p * p).sum().backward()
            opt.step()
    step()
    foreach = [k for key, k in loader._kernels.items() if key[:2] == ("foreach", "adam")]
    assert len(foreach) == 1 and foreach[0].fn is None   # not loaded: the array path ran
    deadline = time.monotonic() + WAIT_S
    while foreach[0].fn is None and time.monotonic() < deadline:   # each step asks again
        step()
        time.sleep(0.05)
    assert foreach[0].fn is not None   # built by a worker, loaded from the disk cache
    step()
    np.testing.assert_array_equal(pa.detach().numpy(), pb.detach().numpy())  # bitwise, either path


def test_later_jobs_queue_after_the_others():
    """A LATER job (a kernel only tier 0 asked for) queued first still runs after a job submitted later
    (the optimizer's kernel a caller's array path waits for), and an eager op's kernel
    between the two; shutdown jumps the queue."""
    pool = workers.CompilePool(0)   # no dispatchers: the queue order is visible
    upgrade = pool.submit("# upgrade", "up", (), later=True)
    eager = pool.submit("# eager relu", "eager", (), rank=workers.EAGER)
    steady = pool.submit("# lstm loop", "loop", (), rank=workers.STEADY)   # a step's own loop
    needed = pool.submit("# needed", "need", ())
    pool.jobs.put((-1, 0, None))
    assert [pool.jobs.get()[2] for _ in range(5)] == [None, needed, steady, eager, upgrade]


def test_a_run_time_variant_queues_behind_the_steady_kernels_asked_before_it(monkeypatch):
    """A compiled entry's run-time variant (`prepare.prepare_variant`: a strided operand's nd
    layout, run on copies meanwhile) queues at rank STEADY: behind a layer's whole-loop
    kernel queued before it (the compiled step runs both at every call, the loop replacing a
    numpy loop, the variant only a copy), still ahead of eager kernels and of LATER jobs,
    and behind the plan kernels a switch waits for, even ones submitted after it."""
    from tracejit.compiler import diskcache
    pool = workers.CompilePool(0)   # no dispatchers: the queue order is visible
    monkeypatch.setattr(workers, "_pool", pool)
    monkeypatch.setattr(diskcache, "is_cached", lambda *a, **k: False)

    class Kern:   # what prepare_variant reads of a plan._Kernel
        label = "LM.forward_fwd_g1"
        defer = None
        def spec(self, layouts, parallel):
            return type("Spec", (), {"source": "# nd parallel variant", "llvm_options": ()})()
        def get(self, layouts, parallel):
            return None
    pool.submit("# tier 0 only", "up", (), later=True)
    eager = pool.submit("# sgd", "eager", (), rank=workers.EAGER)
    loop = pool.submit("# lstm backward loop", "loop", (), rank=workers.STEADY)
    job = prepare.prepare_variant(Kern(), ("nd",), True)
    while pool.jobs.qsize() < 4:   # (its thread submits the worker's job)
        assert not job.done(), job.error
        time.sleep(0.01)
    plan = pool.submit("# a plan kernel", "plan", ())
    taken = [pool.jobs.get()[2] for _ in range(5)]
    assert [j.name_hint for j in taken] == ["plan", "loop", "LM.forward_fwd_g1 nd parallel",
                                            "eager", "up"]
    for j in taken:   # (the variant's thread waits on its job: let it go)
        j._finish(False, workers.SHUT_DOWN)
    assert job.event.wait(WAIT_S) and not job.ok


def test_an_eager_kernel_its_op_stopped_asking_for_goes_after_the_others():
    """A STEADY/EAGER job whose op last asked for it more than ASKED_WITHIN_S ago when a
    worker takes it (a tier-0 op the compiled step does not run) goes back once, rank
    LATER, behind the kernels asked for now; never dropped. One a plan submits as well
    (no `asked`), whose op asks now or never said, or whose op's asks came further apart
    before (a slow step on a starved machine), keeps its place."""
    pool = workers.CompilePool(0)   # no dispatchers: the queue order is visible
    w = workers.ASKED_WITHIN_S
    old = lambda: (time.monotonic() - 10 * w, 0.1)   # noqa: E731
    upgrade = pool.submit("# upgrade", "up", (), later=True)
    stale = pool.submit("# relu, tier 0 only", "stale", (), rank=workers.STEADY, asked=old)
    fresh = pool.submit("# asked now", "fresh", (), rank=workers.EAGER, asked=lambda: (time.monotonic(), 0.1))
    unsaid = pool.submit("# no ask known", "unsaid", (), rank=workers.EAGER, asked=lambda: (None, 0.0))
    slow = pool.submit("# slow steps", "slow", (), rank=workers.STEADY,
                       asked=lambda: (time.monotonic() - 3 * w, 2 * w))
    shared = pool.submit("# a plan's too", "shared", (), rank=workers.EAGER, asked=old)
    assert pool.submit("# a plan's too", "shared", ()) is shared
    needed = pool.submit("# needed", "need", ())
    taken = [pool._asked_lately(pool.jobs.get())[2] for _ in range(7)]
    assert taken == [needed, slow, fresh, unsaid, shared, upgrade, stale]
    assert pool.jobs.empty() and stale.asked is None   # put back once only


def test_eager_op_kernels_are_submitted_with_the_eager_rank(monkeypatch):
    """compiler/cpu/kernels/vectorized.py submits an eager op's kernel with rank EAGER: a background
    compile's plan kernels (FIRST) queued after it still go to the workers first."""
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.kernels import loader, vectorized
    ranks = []
    real = workers.submit

    def submit(source, name_hint, llvm_options=(), later=False, rank=None, asked=None):
        ranks.append((name_hint, rank))
        return real(source, name_hint, llvm_options, later, rank, asked=asked)
    monkeypatch.setattr(workers, "submit", submit)
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    monkeypatch.setattr(vectorized, "_entries", {})        # as in a fresh process
    monkeypatch.setattr(loader, "_GO_AFTER_S", 0.0)    # prepared from the first call on
    monkeypatch.setattr(diskcache, "is_cached", lambda *a, **k: False)
    x = tj.tensor(np.linspace(-1.0, 1.0, 1 << 16).astype(np.float32))
    want = np.tanh(x.numpy())
    np.testing.assert_allclose(x.tanh().numpy(), want, rtol=1e-6)   # numpy meanwhile
    (entry,) = vectorized._entries.values()
    assert entry.job.event.wait(WAIT_S)
    assert ("eager_tanh", workers.EAGER) in ranks, ranks
    np.testing.assert_allclose(x.tanh().numpy(), want, rtol=1e-5, atol=1e-6)


def test_prestart_starts_the_first_worker_once_and_it_takes_jobs(fresh_pool):
    """`workers.prestart` starts the first worker before any job (it pays its start-up while
    the parent plans); a second call starts nothing more; a job then runs on it."""
    fresh_pool.setattr(workers, "spare_core", lambda window=0.0: False)
    workers.prestart()
    pids = workers.worker_pids()
    assert len(pids) == 1
    workers.prestart()
    assert workers.worker_pids() == pids
    job = workers.submit("import numba\n\n@numba.njit('int64(int64)', cache=True)\n"
                         "def k(a):\n    return a * 3 + 1\n# prestart test\n", "prestart", ())
    assert job.event.wait(WAIT_S) and job.ok, job.error
    assert job.compiled == 1
    assert set(workers.worker_pids()) == set(pids)   # no process started for the job


_TINY = "import numba\n\n@numba.njit('int64(int64)', cache=True)\ndef k(a):\n    return a * %d + 1\n"


def test_a_second_worker_starts_only_while_a_core_is_spare(fresh_pool):
    """Workers beyond the first start only when jobs wait and a core is idle
    (`workers.spare_core`): with none spare every job runs on the first worker."""
    fresh_pool.setenv("TRACEJIT_COMPILE_WORKERS", "2")
    fresh_pool.setattr(workers, "spare_core", lambda window=0.0: False)
    jobs = [workers.submit(_TINY % (k + 11), f"spare{k}", ()) for k in range(4)]
    for job in jobs:
        assert job.event.wait(WAIT_S) and job.ok, job.error
    assert len(workers.worker_pids()) == 1


def test_jobs_submitted_while_a_worker_starts_go_by_rank(fresh_pool):
    """A worker takes its first job once its start-up is done, the best one queued by then:
    a FIRST job submitted after a LATER one (both while the worker warms up) runs first."""
    fresh_pool.setattr(workers, "spare_core", lambda window=0.0: False)
    workers.prestart()
    later = workers.submit(_TINY % 21, "later", (), later=True)
    first = workers.submit(_TINY % 22, "first", ())
    done = []
    for job in (later, first):
        threading.Thread(target=lambda j=job: (j.event.wait(WAIT_S), done.append(j.name_hint)),
                         daemon=True).start()
    assert later.event.wait(WAIT_S) and first.event.wait(WAIT_S)
    assert later.ok and first.ok, (later.error, first.error)
    deadline = time.monotonic() + WAIT_S
    while len(done) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == ["first", "later"]


def test_an_idle_slot_takes_a_job_only_when_a_core_is_spare(monkeypatch):
    """A slot without a running worker leaves queued jobs to the running workers while no
    core is spare, takes the next one when one is, and stops when the pool closes."""
    pool = workers.CompilePool(0)   # no dispatcher threads: the test takes the jobs itself
    job = workers.Job(1, "source", "spare", ())
    pool.jobs.put((workers.FIRST, job.id, job))
    monkeypatch.setattr(workers, "SPARE_WINDOW_S", 0.01)
    monkeypatch.setattr(workers, "spare_core", lambda window=0.0: False)
    got = []
    t = threading.Thread(target=lambda: got.append(pool._wait_spare(1)), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got and pool.jobs.qsize() == 1   # left in the queue
    pool.closed = True
    t.join(WAIT_S)
    assert got == [(-1, 0, None)]
    pool.closed = False
    monkeypatch.setattr(workers, "spare_core", lambda window=0.0: True)
    assert pool._wait_spare(1)[2] is job and pool.jobs.qsize() == 0


def test_prestart_starts_the_second_worker_ahead_when_a_core_is_spare(fresh_pool):
    """With the main thread leaving a core idle (a caller waiting), `prestart` has the other
    slots start their workers ahead of any job, as the first one's."""
    fresh_pool.setenv("TRACEJIT_COMPILE_WORKERS", "2")
    fresh_pool.setattr(workers, "spare_core", lambda window=0.0: True)
    workers.prestart()
    deadline = time.monotonic() + WAIT_S
    while len(workers.worker_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers.worker_pids()) == 2


def test_background_work_waits_for_the_first_call_to_end(monkeypatch):
    """The planning thread starts after the first call's tier-0 run (plus a quiet time),
    never during it: a long first step is not shared with autodiff and code generation."""
    monkeypatch.setattr(tiers, "_GO_AFTER_S", 0.0)
    monkeypatch.setattr(tiers, "_GO_AFTER_TIER0", 0.0)
    started, in_call = [], [False]
    real_plan, real_run = tiers.TieredExecutor._plan, tiers.Tier0.__call__
    real_start = tiers.TieredExecutor.start

    def start(self, ins):   # the thread is started here, in the first call
        in_call[0] = True
        return real_start(self, ins)

    def plan(self):
        started.append(in_call[0])
        return real_plan(self)

    def slow_tier0(self, ins):
        try:
            time.sleep(0.3)   # the old rule (1 s from the call's start; here 0) planned now
            return real_run(self, ins)
        finally:
            in_call[0] = False
    monkeypatch.setattr(tiers.TieredExecutor, "start", start)
    monkeypatch.setattr(tiers.TieredExecutor, "_plan", plan)
    monkeypatch.setattr(tiers.Tier0, "__call__", slow_tier0)
    f = tj.trace(_step(1.3125), compile="background")
    x, w = _args(3)
    eager = _loss_and_grad(_step(1.3125), x, w)
    first = _loss_and_grad(f, x, w)
    assert first[0] == pytest.approx(eager[0], rel=1e-6)
    assert tj.compiler.wait(f, timeout=WAIT_S)
    assert started == [False]
    assert f.cache_stats()["tiers"] == ["compiled"]


def test_release_idle_stops_only_workers_without_a_job(fresh_pool):
    """Workers started ahead for a compile that found everything on disk are stopped
    (their start-up would only take CPU from the caller); a worker with a job is kept."""
    fresh_pool.setattr(workers, "spare_core", lambda window=0.0: False)
    workers.prestart()
    assert len(workers.worker_pids()) == 1
    workers.release_idle()
    assert workers.worker_pids() == []
    job = workers.submit("import numba\n\n@numba.njit('int64(int64)', cache=True)\n"
                         "def k(a):\n    return a * 5 + 2\n# release test\n", "release", ())
    assert job.event.wait(WAIT_S) and job.ok, job.error
    busy = workers.worker_pids()
    assert len(busy) == 1
    workers.prestart()   # starts nothing: the first slot has its worker
    workers.release_idle()
    assert workers.worker_pids() == busy


def test_on_disk_record_decides_whether_workers_start_ahead(monkeypatch):
    """A graph never seen complete on disk starts the workers before planning; once its
    kernels are all on disk (compiled here), it is recorded, and a new entry for the
    same graph (as in a warm process) starts no worker ahead."""
    from tracejit.compiler import tierhints
    calls = []
    monkeypatch.setattr(workers, "prestart", lambda: calls.append("prestart"))
    monkeypatch.setattr(workers, "release_idle", lambda: calls.append("release"))
    step = _step(1.4140625)
    f = tj.trace(step, compile="background")
    x, w = _args(4)
    _loss_and_grad(f, x, w)
    (ex,) = [e.executor for e in f._entries]   # the tiered executor (the switch replaces it)
    assert tj.compiler.wait(f, timeout=WAIT_S)
    assert calls and calls[0] == "prestart" and "release" not in calls
    assert tierhints.on_disk(ex._graph_key())
    calls.clear()
    g = tj.trace(_step(1.4140625), compile="background")   # the same graph, all on disk
    _loss_and_grad(g, x, w)
    assert tj.compiler.wait(g, timeout=WAIT_S)
    assert calls == [] and g.cache_stats()["tiers"] == ["compiled"]


def test_tier0_runs_as_eager_code_does():
    """Tier 0 lets values go after their last use and cuts a value taken apart by int
    selects with one node (as eager attention's q, k, v): same values and gradients as the
    plain interpreter, and the cut's backward is one stack, not index_adds."""
    from tracejit.jit.interpreter import interpret, last_uses

    def fn(x, w):
        y = (x @ w).reshape(16, 2, 4)
        return (y[:, 0].tanh() * y[:, 1] + y[:, 0]).sum()
    f = tj.trace(fn, compile="background")
    x, w = _args(5)
    eager = _loss_and_grad(fn, x, w)
    first = _loss_and_grad(f, x, w)
    (entry,) = f.entries
    tier0 = entry.executor.tier0
    assert isinstance(tier0, tiers.Tier0)
    graph = tier0.graph
    assert len(tier0._steps) == 2     # the two selects of y along axis 1
    drops = last_uses(graph)
    assert sum(len(d) for d in drops) > 0
    kept = set(graph.outputs)
    assert not any(v in kept for d in drops for v in d)
    assert first[0] == pytest.approx(eager[0], rel=1e-6)
    np.testing.assert_allclose(first[1], eager[1], rtol=1e-6, atol=1e-7)
    # the same graph through the plain interpreter: the same loss and gradient
    w.grad = None
    (plain,) = interpret(graph, [x, w])
    plain.backward()
    assert float(plain) == pytest.approx(first[0], rel=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), first[1], rtol=1e-6, atol=1e-7)
    # the cut is one autograd node (its backward stacks the slices' gradients)
    w.grad = None
    (out,) = tier0([x, w])
    names, todo, seen = set(), [out.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(getattr(getattr(node, "fn_cls", None), "__name__", type(node).__name__))
        todo.extend(n for n, *_ in getattr(node, "next_functions", ()))
    assert "_Pieces" in names, names
    assert tj.compiler.wait(f, timeout=WAIT_S)


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_a_strided_input_never_compiles_in_the_call_in_background_mode(monkeypatch, mode):
    """A compiled entry meeting a strided operand needs a variant no plan listed ('nd'):
    background mode runs the loaded contiguous variant on a copy while a worker compiles
    it and a thread loads it; sync mode compiles it in the call (today's behaviour)."""
    from tracejit.compiler import diskcache

    c = 1.93 if mode == "background" else 1.97   # (a source new to the disk in each)

    def f(x):
        return ((x * c + 0.5).relu() * x).sum()
    g = tj.trace(f, compile=mode)
    a = np.random.default_rng(3).standard_normal((40, 24)).astype(np.float32)
    assert float(g(tj.tensor(a))) == pytest.approx(float(f(tj.tensor(a))), rel=1e-5)
    assert tj.compiler.wait(g, timeout=WAIT_S) and g.cache_stats()["tiers"] == ["compiled"]
    jobs = []
    real = prepare.prepare_variant
    monkeypatch.setattr(prepare, "prepare_variant", lambda *a: jobs.append(real(*a)) or jobs[-1])
    xt = tj.tensor(np.asfortranarray(a))       # same shape and values, strided
    assert not xt.numpy().flags.c_contiguous
    want = float(f(xt))
    before = diskcache.stats()["compiles"]
    got = float(g(xt))
    assert got == pytest.approx(want, rel=1e-5)
    if mode == "sync":
        assert diskcache.stats()["compiles"] == before + 1 and not jobs
        return
    assert diskcache.stats()["compiles"] == before   # nothing compiled in this process
    assert len(jobs) == 1 and jobs[0].event.wait(WAIT_S) and jobs[0].ok and jobs[0].compiled == 1
    hits = diskcache.stats()["disk_hits"] + diskcache.stats()["memory_hits"]
    after = float(g(xt))                            # now the nd variant itself, loaded
    assert after == pytest.approx(want, rel=1e-5)
    assert diskcache.stats()["compiles"] == before and len(jobs) == 1
    assert diskcache.stats()["disk_hits"] + diskcache.stats()["memory_hits"] == hits
    # the next entry of the graph prepares it when first asked: loaded, never compiled again
    g2 = tj.trace(f, compile="background")
    g2(tj.tensor(a))
    assert tj.compiler.wait(g2, timeout=WAIT_S) and g2.cache_stats()["tiers"] == ["compiled"]
    assert float(g2(xt)) == pytest.approx(want, rel=1e-5)
    assert len(jobs) == 2 and jobs[1].event.wait(WAIT_S) and jobs[1].ok and jobs[1].compiled == 0
    assert float(g2(xt)) == pytest.approx(want, rel=1e-5)
    assert diskcache.stats()["compiles"] == before


def test_a_strided_input_in_a_training_step_gives_eager_values_without_compiling(monkeypatch):
    """Forward and backward plans both meet the strided operand: the loss and the gradient
    equal eager's on the copies, then on the variants the workers compiled."""
    from tracejit.compiler import diskcache
    def step(x, w):
        return ((x * 1.41).tanh() @ w + x).pow(2).mean()
    f = tj.trace(step, compile="background")
    x, w = _args(5)
    _loss_and_grad(f, x, w)
    assert tj.compiler.wait(f, timeout=WAIT_S) and f.cache_stats()["tiers"] == ["compiled"]
    jobs = []
    real = prepare.prepare_variant
    monkeypatch.setattr(prepare, "prepare_variant", lambda *a: jobs.append(real(*a)) or jobs[-1])
    xs = tj.tensor(np.asfortranarray(x.numpy()))
    eager = _loss_and_grad(step, xs, w)
    before = diskcache.stats()["compiles"]
    for _ in range(2):   # on copies, then (once the jobs are done) on the nd variants
        got = _loss_and_grad(f, xs, w)
        assert got[0] == pytest.approx(eager[0], rel=1e-5)
        np.testing.assert_allclose(got[1], eager[1], rtol=1e-4, atol=1e-5)
        assert diskcache.stats()["compiles"] == before
        assert jobs and all(j.event.wait(WAIT_S) and j.ok for j in jobs)
    assert f.cache_stats()["entries"] == 1


def test_new_size_classes_of_a_symbolic_entry_never_compile_in_the_call(in_process_compiles):
    """After the switch, a symbolic entry's calls with sizes on both sides of PARALLEL_MIN
    (its plans' serial and parallel twins) and the size-1 entry a later call adds compile
    nothing in this process:
    every variant was planned, compiled by a worker and loaded by the background thread.
    Loss and gradient equal eager's throughout."""
    from tracejit.threads import PARALLEL_MIN

    def step(x, w):
        h = (x @ w * 1.8125 + 0.5).tanh() * x.sum(1, keepdim=True)
        return (h * h).mean()
    f = tj.trace(step, compile="background")
    rng = np.random.default_rng(11)
    w = tj.tensor(rng.standard_normal((24, 8)).astype(np.float32) * 0.2, requires_grad=True)
    big = 2 * PARALLEL_MIN // 8                        # (big, 8) groups run their parallel twin

    def check(n):
        x = tj.tensor(rng.standard_normal((n, 24)).astype(np.float32))
        want, got = _loss_and_grad(step, x, w), _loss_and_grad(f, x, w)
        assert got[0] == pytest.approx(want[0], rel=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-6)
    check(40)
    assert tj.compiler.wait(f, timeout=WAIT_S)
    check(41)                                          # a second entry, its dim symbolic
    assert f.cache_stats()["dynamic_dims"] and f.cache_stats()["tiers"] == ["compiled", "tier0"]
    assert tj.compiler.wait(f, timeout=WAIT_S)
    for n in (42, big, 3, big + 5, 7, 2 * big, 9):
        check(n)
    symbolic = f._entries[1].executor
    assert f.cache_stats()["tiers"] == ["compiled", "compiled"] and getattr(symbolic, "state", "") == ""
    check(1)                                           # size 1 stays special: a third entry
    assert tj.compiler.wait(f, timeout=WAIT_S)
    check(1)
    assert f.cache_stats()["tiers"] == ["compiled"] * 3
    assert not in_process_compiles, "\n".join(in_process_compiles)


def test_explain_and_cache_stats_count_the_kernels_of_every_entry():
    import re
    step = _step(3.3125)
    f = tj.trace(step, compile="background")
    x, w = _args(6)
    _loss_and_grad(f, x, w)                     # the training entry
    with tj.no_grad():
        f(x, w)                                 # the inference entry
    ex = f.explain(x, w)                        # (grad on: the training entry, now planned)
    line = ex["tier"]
    m = re.search(r"(\d+) of (\d+) kernels in(?:, (\d+) still compiling)?", line)
    assert m, line
    done, total, pending = int(m[1]), int(m[2]), int(m[3] or 0)
    assert total >= 1 and (done + pending == total or "loading" in line), line
    entries = ex["entries"].splitlines()
    assert len(entries) == 2 and sum(e.startswith("*") for e in entries) == 1, entries
    assert all("grad on" in e or "grad off" in e for e in entries)
    titles = [t for t, _ in ex.sections]
    assert {"fusion groups (inference)", "fusion groups (backward)"} <= set(titles) \
        or "fusion groups (training forward, with the loss's gradients)" in titles, titles
    st = f.cache_stats()
    counts = [e.origin.kernel_counts() for e in f.entries]
    known = [c for c in counts if c is not None]
    assert st["planning"] == len(counts) - len(known)
    assert st["kernels_done"] + st["pending_kernels"] == sum(c[1] for c in known)
    assert tj.compiler.wait(f, timeout=WAIT_S)
    st = f.cache_stats()
    assert st["planning"] == 0 and st["pending_kernels"] == 0
    assert st["kernels_done"] == sum(e.origin.kernel_counts()[1] for e in f.entries)
    for e in f.entries:
        d, t = e.origin.kernel_counts()
        assert d == t and f"{t} of {t} kernels in" in e.origin.describe()
