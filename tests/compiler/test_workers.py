"""compiler/workers.py: the queue's order for a job that loads another job's module."""
import math
import subprocess
import threading
import time

from tracejit.compiler import workers
from tracejit.compiler import prepare


def test_a_job_waits_for_the_job_whose_module_it_loads():
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    kernel = workers.Job(1, "kernel", "k", ())
    pair = workers.Job(2, "pair", "k_pair", (), after=kernel)
    other = workers.Job(3, "other", "o", ())
    pool.jobs.put((workers.FIRST, 3, other))
    # the pair's kernel is compiling elsewhere: the next job goes first, the pair back
    assert pool._unblocked((workers.FIRST, 2, pair))[2] is other
    item = pool.jobs.get_nowait()
    assert item[2] is pair and pool.jobs.empty()
    # nothing else queued: the pair waits for its kernel, then goes
    threading.Timer(0.2, kernel._finish, (True,)).start()
    t0 = time.monotonic()
    assert pool._unblocked(item)[2] is pair and kernel.done()
    assert time.monotonic() - t0 > 0.1
    # a finished prerequisite (or one lost by a fork) holds nothing back
    assert not pair.blocked()
    assert pool._unblocked((workers.FIRST, 2, pair))[2] is pair


def test_shutdown_finishes_the_jobs_it_leaves_queued():
    # A module's preparation thread waits on its job's event: a job still queued when the
    # pool shuts down is never taken, and must not leave that thread (and the module) waiting.
    pool = workers.CompilePool(0)
    job = workers.Job(1, "source", "k", ())
    pool.jobs.put((workers.EAGER, 1, job))
    pool.shutdown()
    assert job.done() and not job.ok and job.error == workers.SHUT_DOWN


def test_a_module_job_the_pool_never_ran_is_started_again(monkeypatch, tmp_path):
    # prepare.module_job keeps one job per module; one that failed only because the pool was
    # shut down before it ran is prepared again (a new pool takes it), not kept failed.
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prepare, "_module_jobs", {})
    made = []

    def fake_prepare(source, name_hint, llvm_options, rank, after):
        job = workers.Job(len(made) + 1, source, name_hint, llvm_options)
        made.append(job)
        return job
    monkeypatch.setattr(prepare, "_prepare_module", fake_prepare)
    first = prepare.module_job("src", "m")
    first._finish(False, workers.SHUT_DOWN)
    again = prepare.module_job("src", "m")
    assert again is not first and len(made) == 2
    again._finish(False, "a real compile error")
    assert prepare.module_job("src", "m") is again    # a real failure stays failed


def _held(pool, source: str, name: str):
    """A LATER job held (`Job.hold`) until a core is idle or a caller waits."""
    job = pool.submit(source, name, (), later=True)
    job.hold = lambda: True
    return job


def test_a_held_job_waits_for_an_idle_core_or_a_waiter(monkeypatch):
    """A held job is not taken while no core is free (the program and other processes
    keep them busy): a job queued meanwhile is taken instead and the held one goes back;
    it runs once a core is free, or at once while a caller waits (`workers.waiting`). An
    eager kernel put back because its op stopped asking is held too, until its op asks
    again."""
    monkeypatch.setattr(workers, "SPARE_WINDOW_S", 0.01)
    monkeypatch.setattr(workers, "HOLD_POLL_S", 0.002)
    monkeypatch.setattr(workers, "HOLD_SETTLE_S", 0.0)
    free = [0.0]                             # cores neither we nor others used
    monkeypatch.setattr(workers._CPUReading, "free", lambda self: free[0])
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    upgrade = _held(pool, "# upgrade", "up")
    assert pool.jobs.queue[0][0] == workers.LATER and upgrade.hold is not None
    got = []
    t = threading.Thread(target=lambda: got.append(pool._when_idle(pool.jobs.get())), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got          # no core free: held
    needed = pool.submit("# needed", "need", ())
    t.join(60)
    assert got[0][2] is needed               # taken instead; the upgrade is back in the queue
    item = pool.jobs.get_nowait()
    assert item[2] is upgrade and upgrade.hold is not None
    free[0] = 1.0                            # one core idle: it runs
    assert pool._when_idle(item)[2] is upgrade and upgrade.hold is None
    free[0] = 0.0
    other = _held(pool, "# upgrade 2", "up2")
    with workers.waiting():                  # a caller waits for it: not held
        assert pool._when_idle(pool.jobs.get_nowait())[2] is other and other.hold is None
    # a plan that needs a held kernel's module releases it
    third = _held(pool, "# upgrade 3", "up3")
    assert pool.submit("# upgrade 3", "up3", ()) is third and third.hold is None
    # an eager kernel whose op stopped asking: back at rank LATER, held until it asks again
    last = [time.monotonic() - 10 * workers.ASKED_WITHIN_S]
    stale = pool.submit("# relu", "stale", (), rank=workers.EAGER, asked=lambda: (last[0], 0.1))
    assert pool._asked_lately(pool.jobs.get_nowait())[2] is third
    item = pool.jobs.get_nowait()
    assert item[:1] == (workers.LATER,) and item[2] is stale and pool._held(item) is stale
    last[0] = time.monotonic()               # its op asks again (tier 0 is back)
    assert pool._held(item) is None and stale.hold is None


def test_no_worker_starts_ahead_after_release_idle(monkeypatch):
    """`prestart` asks the other slots to start their workers ahead once a core is idle; a
    plan that then finds every kernel on disk calls `release_idle`. When that call lands
    while a slot is still measuring whether a core is idle (`spare_core`'s window), the slot
    must not start its worker afterwards: nothing would ever stop it (a warm-disk process
    kept an idle worker under load)."""
    monkeypatch.setattr(workers, "SPARE_WINDOW_S", 0.01)
    started = []

    class _FakeWorker:          # no process: record the start
        def __init__(self):
            started.append(self)
            self.used = False
            self.proc = self

        def poll(self):
            return None

        def kill(self):
            pass

    monkeypatch.setattr(workers, "_Worker", _FakeWorker)
    pool = workers.CompilePool(0)    # no dispatcher threads: we play slot 1's
    pool.workers = [None, None]
    pool.ahead = True

    measured = threading.Event()

    def spare_core_while_released(window=0.0):
        pool.release_idle()          # the plan's release arrives during the measurement
        measured.set()
        return True
    monkeypatch.setattr(workers, "spare_core", spare_core_while_released)
    got = []
    t = threading.Thread(target=lambda: got.append(pool._wait_spare(1)), daemon=True)
    t.start()
    assert measured.wait(30)         # the slot did measure (the case under test ran)
    time.sleep(0.05)                 # and had its chance to start a worker after it
    pool.closed = True
    t.join(5)
    assert got == [(-1, 0, None)]    # it waited on (nothing asked any more) until the close
    assert started == [] and pool.workers == [None, None]
    # without a release, the same measurement starts the worker ahead
    pool.closed, pool.ahead = False, True
    monkeypatch.setattr(workers, "spare_core", lambda window=0.0: True)
    assert pool._wait_spare(1) is None
    assert len(started) == 1 and pool.workers[1] is started[0] and not pool.ahead


def test_promote_moves_a_queued_job_up_to_its_new_rank():
    """A kernel queued LATER (only tier-0 forwards asked for it) that a compiled step or
    eager code then asks for moves up (compiler/cpu/kernels/loader.py): taken before the EAGER jobs queued
    after it, after those queued before it, and never moved down or when not queued."""
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    early = pool.submit("# early", "early", (), rank=workers.EAGER)
    late = pool.submit("# late", "late", (), rank=workers.LATER)
    after = pool.submit("# after", "after", (), rank=workers.EAGER)
    upgrade = pool.submit("# upgrade", "up", (), rank=workers.LATER)
    assert pool.promote(late, workers.EAGER)
    assert not pool.promote(late, workers.LATER)        # never down
    assert not pool.promote(late, workers.EAGER)        # already there
    order = [pool.jobs.get_nowait() for _ in range(4)]
    assert [item[2] for item in order] == [early, late, after, upgrade]
    assert [item[0] for item in order] == [workers.EAGER, workers.EAGER, workers.EAGER,
                                           workers.LATER]
    assert not pool.promote(upgrade, workers.FIRST)     # taken: nothing to move
    assert pool.jobs.empty()


def test_demote_moves_a_queued_job_down_behind_that_ranks_jobs():
    """A layer's kernel asked for only by tier 0 and a fused kernel's stand-in (compiler/cpu/kernels/loader.py
    `standing_in`) goes from STEADY down to LATER, behind the LATER jobs queued by then;
    never up, and nothing moves once it is taken."""
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    part = pool.submit("# part", "part", (), rank=workers.STEADY)
    fused = pool.submit("# fused", "fused", (), rank=workers.STEADY)
    upgrade = pool.submit("# upgrade", "up", (), rank=workers.LATER)
    eager = pool.submit("# eager", "eager", (), rank=workers.EAGER)
    assert pool.demote(part, workers.LATER)
    assert not pool.demote(part, workers.STEADY)        # never up
    assert not pool.demote(part, workers.LATER)         # already there
    order = [pool.jobs.get_nowait() for _ in range(4)]
    assert [item[2] for item in order] == [fused, eager, upgrade, part]
    assert [item[0] for item in order] == [workers.STEADY, workers.EAGER, workers.LATER,
                                           workers.LATER]
    assert not pool.demote(fused, workers.LATER)        # taken: nothing to move
    assert pool.jobs.empty()


def test_a_later_kernel_whose_op_stopped_asking_is_held():
    """A kernel queued LATER because only tier-0 forwards asked for it (compiler/cpu/kernels/loader.py,
    compiler/cpu/kernels/vectorized.py) whose op stopped asking (the entry switched: its plan fuses the op)
    is held like a put-back EAGER one, until its op asks again or a core is idle; one whose
    op still asks runs in its turn, and a LATER job of no op's (an upgrade) is untouched."""
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    last = [time.monotonic() - 10 * workers.ASKED_WITHIN_S]
    quiet = pool.submit("# layer norm", "ln", (), rank=workers.LATER, asked=lambda: (last[0], 0.1))
    asking = pool.submit("# gelu", "gelu", (), rank=workers.LATER,
                         asked=lambda: (time.monotonic(), 0.1))
    plain = pool.submit("# plain", "plain", (), rank=workers.LATER)
    # the quiet one, first in line, goes back behind the others, held
    item = pool._asked_lately(pool.jobs.get_nowait())
    assert item[2] is asking and pool._held(item) is None       # still asked for: runs
    assert pool._asked_lately(pool.jobs.get_nowait())[2] is plain
    item = pool.jobs.get_nowait()
    assert item[2] is quiet and item[0] == workers.LATER and pool._held(item) is quiet
    # a held job in a dispatcher's hand goes behind a job queued meanwhile at its rank
    # (at its old place it would come straight back: swapped without end)
    other = pool.submit("# other", "other", (), rank=workers.LATER)
    assert pool._when_idle(item)[2] is other
    assert [i[2] for i in pool.jobs.queue] == [quiet]
    last[0] = time.monotonic()                                  # asked again: released
    assert pool._held(pool.jobs.queue[0]) is None and quiet.hold is None


def test_the_program_cedes_its_second_thread_while_a_worker_compiles(monkeypatch):
    """While a worker of this process starts up or compiles a job (`workers.compiling`), the
    thread policy leaves the partner's core to it (coreshare.ceding: the split recurrent
    loops then run on the program's one thread); once the worker is done the partner comes
    back. Not for a job no call waits for (rank LATER), nor where the program keeps two
    cores beside the worker."""
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setenv("TRACEJIT_COMPILE_WORKER_FAULT", "hang")   # the job never ends
    monkeypatch.setattr(coreshare.core_share, "cpus", 2)   # (a 2-core machine)
    assert not workers.compiling() and not coreshare.ceding()
    pool = workers.CompilePool(1)
    try:
        job = pool.submit("# never compiled", "hang", ())
        deadline = time.monotonic() + 60
        while (pool.workers[0] is None or not pool.workers[0].ready.is_set() or pool.jobs.qsize()
               or workers.compiling() != 1):
            assert time.monotonic() < deadline    # (the dispatcher starts a worker, sends the job)
            time.sleep(0.01)
        assert workers.compiling() == 1 and coreshare.ceding() and not job.done()
        monkeypatch.setattr(coreshare.core_share, "cpus", 3)   # a core to spare: no cede
        assert workers.compiling() and not coreshare.ceding()
        monkeypatch.setattr(coreshare.core_share, "cpus", 2)
        monkeypatch.setenv("TRACEJIT_CEDE", "0")
        assert not coreshare.ceding()
        monkeypatch.setenv("TRACEJIT_CEDE", "1")
    finally:
        pool.shutdown()
    assert job.event.wait(10) and not job.ok   # (its dispatcher sees the worker killed)
    deadline = time.monotonic() + 10
    while workers.compiling():               # (its dispatcher sees the killed worker's end)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # a job no call waits for (rank LATER: a parfor upgrade, a kernel only tier 0 asked for)
    # leaves the program its second thread
    pool = workers.CompilePool(1)
    try:
        later = pool.submit("# never compiled either", "hang-later", (), later=True)
        deadline = time.monotonic() + 60
        while pool.workers[0] is None or not pool.workers[0].ready.is_set() or pool.jobs.qsize():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.05)
        assert not later.done() and not workers.compiling() and not coreshare.ceding()
        # ... but it is work of our own at our priority: the policy tries no full count
        # meanwhile (coreshare.CoreShare's trials), so `running` counts it
        while workers.running() != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        pool.shutdown()
    assert later.event.wait(10) and not later.ok
    deadline = time.monotonic() + 10
    while workers.compiling() or workers.running():   # the killed worker's reader saw its end
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not coreshare.ceding()


def test_a_worker_starting_up_counts_as_compiling(monkeypatch):
    """A worker's start-up (Python, tracejit, numba: 0.6-0.8 s of a core) is compile work the
    program cedes its second thread to, from its start until it is ready or gone."""
    import subprocess
    import sys
    real = subprocess.Popen

    def slow_start(args, **kw):   # a worker that never gets ready
        return real([sys.executable, "-c", "import time; time.sleep(60)"], **kw)
    monkeypatch.setattr(subprocess, "Popen", slow_start)
    assert not workers.compiling()
    w = workers._Worker()
    try:
        assert workers.compiling() and not w.ready.is_set()
    finally:
        w.kill()
    assert w.ready.wait(10) and not workers.compiling()


def test_a_worker_freezes_its_start_up_and_collects_garbage_rarely():
    """compile_worker's `_tune_gc` (called after the warm-up): what numba's import left is
    frozen (never rescanned by the collector) and the thresholds are `GC_THRESHOLDS`. In a
    process of its own: the settings are the whole interpreter's."""
    import subprocess
    import sys
    code = ("import gc, numba\n"
            "from tracejit.compiler import compile_worker as w\n"
            "before = gc.get_freeze_count()\n"
            "w._tune_gc()\n"
            "print(gc.get_threshold() == w.GC_THRESHOLDS, before, gc.get_freeze_count())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True" and int(out[1]) == 0
    assert int(out[2]) > 10_000   # numba's import alone leaves ~100,000 tracked objects


def test_a_job_that_may_run_is_taken_from_behind_held_ones(monkeypatch):
    """A held job in a dispatcher's hand (waiting for a core no one uses) gives way to any
    queued job that need not wait, not only to the queue's head: a job queued at rank LATER
    behind held jobs put back at that rank (the GEMM halves' module, asked for by the
    compiled step at every call, behind the eager kernels its op stopped asking for) is
    taken while no core is free. Before, the dispatcher read the head alone, held too, and
    the asked-for job waited for an idle core that training never left."""
    monkeypatch.setattr(workers, "SPARE_WINDOW_S", 0.01)
    monkeypatch.setattr(workers, "HOLD_POLL_S", 0.002)
    monkeypatch.setattr(workers, "HOLD_SETTLE_S", 0.0)
    monkeypatch.setattr(workers._CPUReading, "free", lambda self: 0.0)   # never a core free
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    quiet = [time.monotonic() - 10 * workers.ASKED_WITHIN_S]
    relu = pool.submit("# relu", "relu", (), rank=workers.LATER, asked=lambda: (quiet[0], 0.1))
    norm = pool.submit("# norm", "norm", (), rank=workers.LATER, asked=lambda: (quiet[0], 0.1))
    # both taken in turn and put back held (their op stopped asking): the dispatcher holds relu
    item = pool._asked_lately(pool.jobs.get_nowait())
    assert item[2] is relu and pool._held(item) is relu and norm.hold is not None
    assert [i[2] for i in pool.jobs.queue] == [norm]
    halves = pool.submit("# halves", "halves", (), rank=workers.LATER,
                         asked=lambda: (time.monotonic(), 0.05))   # asked at every step
    assert sorted(pool.jobs.queue)[0][2] is norm                   # queued behind the held one
    got = []
    t = threading.Thread(target=lambda: got.append(pool._when_idle(item)), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive() and got[0][2] is halves
    assert pool._asked_lately(got[0])[2] is halves                 # and it runs (still asked)
    # the held ones stay queued, held, the one in hand behind the other
    assert [i[2] for i in sorted(pool.jobs.queue)] == [norm, relu]
    assert all(pool._held(i) is not None for i in pool.jobs.queue)
    # with only held jobs queued, the one in hand keeps waiting (no swap between held ones)
    item = pool.jobs.get_nowait()
    t = threading.Thread(target=lambda: got.append(pool._when_idle(item)), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive() and len(got) == 1
    # shutdown (closed, then a stop per dispatcher): the held job comes back to be finished,
    # the stop stays for a dispatcher waiting on the queue
    pool.closed = True
    pool.jobs.put((-1, 0, None))
    t.join(30)
    assert not t.is_alive() and got[1] is item and pool.jobs.queue[0] == (-1, 0, None)


def test_a_later_job_starts_once_the_queue_settled(monkeypatch):
    """A LATER job no one holds (the GEMM halves' module the compiled step asks for) starts
    only once no job of an earlier rank was submitted, moved up or finished for
    `LATER_SETTLE_S`: a kernel asked for a step after the previous one loaded (LSTM LM:
    index_add_rows' flat kernel) is taken before it, not behind its seconds of compile. A
    caller waiting starts it at once; with nothing of an earlier rank ever, it runs at once."""
    monkeypatch.setattr(workers, "HOLD_POLL_S", 0.002)
    monkeypatch.setattr(workers, "LATER_SETTLE_S", 1e6)     # settled only when we say so
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    asking = lambda: (time.monotonic(), 0.05)                # noqa: E731 (asked at every step)
    first = pool.submit("# halves", "halves", (), rank=workers.LATER, asked=asking)
    assert pool.stirred == -math.inf                          # nothing before it: settled
    assert pool._when_idle(pool.jobs.get_nowait())[2] is first
    # a job of an earlier rank submitted, moved up, or finished: unsettled from then on
    steady = pool.submit("# add rows", "add_rows", (), rank=workers.STEADY)
    assert pool.stirred > -math.inf
    assert pool.jobs.get_nowait()[2] is steady
    pool.stirred = -math.inf
    late = pool.submit("# late", "late", (), rank=workers.LATER)
    assert pool.promote(late, workers.EAGER) and pool.stirred > -math.inf
    assert pool.jobs.get_nowait()[2] is late
    monkeypatch.setattr(pool, "_run_on", lambda i, job: None)
    for rank, stirs in ((workers.LATER, False), (workers.STEADY, True)):
        pool.stirred = -math.inf
        pool._run(0, steady, rank)
        assert (pool.stirred > -math.inf) is stirs
    # the halves' module waits while the queue is unsettled ...
    halves = pool.submit("# halves 2", "halves2", (), rank=workers.LATER, asked=asking)
    item = pool.jobs.get_nowait()
    assert pool._unsettled(item) is halves and pool._waits(item) is halves and pool._held(item) is None
    got = []
    t = threading.Thread(target=lambda: got.append(pool._when_idle(item)), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got
    # ... and the kernel the step asks for next is taken instead; the halves go back
    flat = pool.submit("# flat", "add_rows_flat", (), rank=workers.EAGER, asked=asking)
    t.join(30)
    assert got[0][2] is flat
    item = pool.jobs.get_nowait()
    assert item[2] is halves and pool.jobs.empty()
    # a held job in a dispatcher's hand does not swap for an unsettled LATER one
    upgrade = _held(pool, "# upgrade", "up")
    assert pool._take_runnable() is None and [i[2] for i in sorted(pool.jobs.queue)] == [upgrade]
    pool.jobs.get_nowait()
    with workers.waiting():                                    # a caller waits: at once
        assert pool._unsettled(item) is None and pool._when_idle(item)[2] is halves
    pool.jobs.put(item)
    assert pool._take_runnable() is None                       # still unsettled
    pool.stirred = -math.inf                                   # settled: it runs
    assert pool._waits(item) is None and pool._take_runnable() is item and pool.jobs.empty()


def _slow_kernel(c: float) -> str:
    """A kernel module numba takes a while to compile (many statements): a job that is
    still in flight when the test kills its worker."""
    body = "\n".join(f"    s = s * {c!r} + a[{k} % a.shape[0]] * {k + 1}.0" for k in range(200))
    return ('from numba import njit\n\n@njit("float64(float64[::1])", cache=CACHE)\n'
            f"def kernel(a):\n    s = 0.0\n{body}\n    return s\n")


def test_a_killed_worker_is_replaced_and_its_job_sent_again(tmp_path, monkeypatch, caplog):
    import gc
    import logging
    import os
    import signal
    import warnings
    from tracejit.compiler import diskcache
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRACEJIT_COMPILE_WORKER_FAULT", raising=False)
    pool = workers.CompilePool(1)
    try:
        with warnings.catch_warnings(record=True) as rec, caplog.at_level(logging.INFO, "tracejit.compile"):
            warnings.simplefilter("always", ResourceWarning)
            job = pool.submit(_slow_kernel(1.0009765625), "slow", ())
            deadline = time.monotonic() + 240
            while pool.current[0] is not job and not job.done() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert pool.current[0] is job and not job.done()   # in flight on the worker
            victim = pool.workers[0].proc.pid
            os.kill(victim, signal.SIGKILL)
            assert job.event.wait(240)
            assert job.ok, job.error
            assert pool.workers[0].proc.pid != victim           # a new worker took it
            gc.collect()
        assert any("a new worker takes the job again" in r.getMessage() for r in caplog.records)
        assert not [w for w in rec if issubclass(w.category, ResourceWarning)], \
            [str(w.message) for w in rec]
        assert diskcache.is_cached(job.source)
    finally:
        pool.shutdown()


def test_a_worker_that_keeps_dying_fails_the_job_after_its_restarts(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRACEJIT_COMPILE_WORKER_FAULT", "crash")   # every worker, every job
    pool = workers.CompilePool(1)
    try:
        job = pool.submit("x = 1\n", "doomed", ())
        assert job.event.wait(240)
        assert not job.ok
        assert "crashed" in job.error and f"tried {workers.RESTARTS + 1} times" in job.error
    finally:
        pool.shutdown()
