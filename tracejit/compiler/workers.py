"""Compile workers: separate processes that compile kernel modules into the disk cache.

Why processes: numba compiles under one global lock per process, and a compiling thread
left the main thread ~68% of its speed. A worker compiles into the shared disk cache and
the parent loads the verified entry in a few ms. ``subprocess`` running `compile_worker`,
not ``multiprocessing``: spawn re-imports the user's ``__main__`` and fork copies numba's
thread pools mid-state; a fresh interpreter speaks JSON lines over pipes.

The pool starts lazily (or ahead via `prestart`) with ``min(cores, 2)`` workers
(``TRACEJIT_COMPILE_WORKERS``), only the first at once, another when the program leaves a
core idle (`spare_core`). Workers take the best queued job by rank; a crashed or hung
worker (``TRACEJIT_COMPILE_TIMEOUT``, default 300 s) is restarted and its job fails. A job
no one waits for is held until a core is idle or a caller waits; a LATER job starts once
the queue has settled. `compiling()` lets the thread policy cede a core to the workers.
After ``os.fork`` the child gets a pool of its own and owners resubmit lost jobs.
"""
from __future__ import annotations

import atexit
import contextlib
import heapq
import logging
import math
import os
import queue
import threading
import time
from typing import Optional

from .. import envflags
from ..threads import usable_cpus
from .ranks import EAGER, FIRST, LATER, STEADY  # noqa: F401  (queue ranks, lowest first)
# (the pool's job choice and worker processes: modules of their own, which read this one's
# thresholds and counters as `workers.X` when they run)
from .worker_choice import Job, JobChoice, _CPUReading
from .worker_process import _Worker

__all__ = ["Job", "submit", "promote", "demote", "prestart", "release_idle", "shutdown", "pool_size",
           "worker_pids", "waiting", "compiling", "running"]

_DEFAULT_TIMEOUT_S = 300.0
log = logging.getLogger("tracejit.compile")  # TRACEJIT_LOG=compile

# A worker beyond the first starts only while the program leaves a core idle over
# `SPARE_WINDOW_S` (its CPU time plus a core per live worker at least `SPARE_IDLE_CORES`
# below our CPUs): with training on, two workers each pay their start-up and compile the
# same helpers (MLP cold compile: 5.3-5.8 s of worker CPU with two, 3.6-3.8 with one).
SPARE_WINDOW_S = 0.25
SPARE_IDLE_CORES = 0.75


SHUT_DOWN = "the compile pool was shut down"   # a job's error when it never ran

# A worker that dies under a job (a crash, a kill from outside) is replaced and the job sent
# to the new one, at most this many times; then the job fails.
RESTARTS = 2


def pool_size() -> int:
    n = envflags.integer("TRACEJIT_COMPILE_WORKERS")
    if n is not None:
        return n
    return max(1, min(usable_cpus(), 2))


def spare_core(window: float = SPARE_WINDOW_S) -> bool:
    """Whether the program leaves a core idle over the next `window` seconds (this sleeps):
    its CPU time less our background threads', plus a core per live worker, against our
    CPUs."""
    reading = _CPUReading()
    time.sleep(window)
    return usable_cpus() - reading.cores() - len(worker_pids()) >= SPARE_IDLE_CORES


# Callers blocked until jobs finish (`waiting`: tiers.wait): a held job (`Job.hold`) runs
# then whatever the program's CPU reads, since the caller waits for it.
_waiters = 0
_waiters_lock = threading.Lock()


# Workers starting up plus waited-for jobs compiling now (`compiling`, coreshare.ceding).
_in_flight = 0
_in_flight_lock = threading.Lock()


# Jobs no call waits for (rank LATER) that workers compile now: with `_in_flight`, what
# `running` says (the thread policy tries no full count while any worker works).
_later = 0


def _busy(n: int, waited: bool = True) -> None:
    """Count `n` more (or fewer) workers starting up or compiling: in `_in_flight` when a
    call waits for it (`compiling`), else in `_later` (`running` only)."""
    global _in_flight, _later
    with _in_flight_lock:
        if waited:
            _in_flight += n
        else:
            _later += n


class waiting:
    """``with workers.waiting():`` around a wait for jobs: held jobs (`Job.hold`) are not
    held meanwhile."""

    def __enter__(self):
        global _waiters
        with _waiters_lock:
            _waiters += 1
        return self

    def __exit__(self, *exc):
        global _waiters
        with _waiters_lock:
            _waiters -= 1
        return False


def _timeout() -> float:
    t = envflags.number("TRACEJIT_COMPILE_TIMEOUT")
    return _DEFAULT_TIMEOUT_S if t is None else t



# A STEADY or EAGER job whose op has not asked for its kernel for this long (and twice its
# longest gap) goes back to the queue once at rank LATER: a tier-0 op the compiled step
# does not run stops asking. It still compiles, after the kernels the step asks for.
ASKED_WITHIN_S = 2.0

# A held job (`Job.hold`) is taken only when a core is free (neither the program nor
# another process used it) or a caller waits: on 2 cores a compile costs a step that trains
# on both (Transformer: 88 ms against 48). Its dispatcher looks every `HOLD_POLL_S`.
HOLD_POLL_S = 0.05
# The program's CPU is read from `HOLD_SETTLE_S` after the hold began and must leave a core
# idle over `HOLD_IDLE_WINDOWS` windows in a row (the thread policy gives a thread back
# only a window after the worker is idle).
HOLD_SETTLE_S = 0.5
HOLD_IDLE_WINDOWS = 2
# A LATER job no one holds starts only once no earlier-rank job was submitted, moved or
# finished for `LATER_SETTLE_S` (or a caller waits): a kernel just loaded makes the step ask
# for the next, which a LATER job taken at once would hold back by its whole compile.
LATER_SETTLE_S = 0.5


def _quiet_since(last: float, gap: float) -> bool:
    """Whether an op whose latest ask was at `last` (time.monotonic()) and whose longest
    time between two asks is `gap` has stopped asking (`ASKED_WITHIN_S`)."""
    return time.monotonic() - last > max(ASKED_WITHIN_S, 2 * gap)


def _not_asking(asked) -> bool:
    """Whether an op's kernel (``asked``: see `Job.asked`) was not asked for lately."""
    last, gap = asked()
    return last is None or _quiet_since(last, gap)


class CompilePool(JobChoice):
    """Dispatcher threads, each owning at most one worker process, fed from one queue."""

    def __init__(self, size: int):
        self.pid = os.getpid()
        # (rank, sequence, job): `FIRST` jobs first, then `STEADY`, `EAGER`, `LATER`
        # (see there); -1 stops.
        self.jobs: queue.PriorityQueue = queue.PriorityQueue()
        self.workers: list = [None] * size
        self.closed = False
        self._ids = iter(range(1, 1 << 62))
        # (reentrant: `_wait_spare` starts a worker ahead under it, and `worker` takes it)
        self._lock = threading.RLock()
        self.by_source: dict = {}  # (source, llvm options) -> Job, so entries share compiles
        self.ahead = False   # `prestart` asked: the other slots start ahead of jobs when spare
        # time.monotonic() of the latest job of a rank before LATER submitted, moved up or
        # finished (`_unsettled`)
        self.stirred = -math.inf
        self.current: list = [None] * size   # per slot, the job its worker compiles now
        for i in range(size):
            threading.Thread(target=self._dispatch, args=(i,), daemon=True,
                             name=f"tracejit-compile-{i}").start()

    def submit(self, source: str, name_hint: str, llvm_options: tuple, later: bool = False,
               rank: int | None = None, after: Optional[Job] = None, asked=None) -> Job:
        with self._lock:
            key = (source, tuple(llvm_options))
            job = self.by_source.get(key)
            if job is not None and not (job.done() and not job.ok):
                if asked is None:
                    job.asked = None   # someone needs it without an op's asking: never put back
                job.hold = None        # ... nor held
                return job
            job = Job(next(self._ids), source, name_hint, llvm_options, after, asked)
            self.by_source[key] = job
        rank = rank if rank is not None else LATER if later else FIRST
        if rank < LATER:
            self.stirred = time.monotonic()
        self.jobs.put((rank, job.id, job))
        return job

    def promote(self, job: Job, rank: int) -> bool:
        """Move `job`, queued at a rank after `rank`, up to `rank` (placed by its sequence
        number). False when it is not queued at such a rank."""
        return self._requeue(job, rank, True)

    def demote(self, job: Job, rank: int) -> bool:
        """Move `job`, queued at a rank before `rank`, down to `rank` behind the jobs there.
        False when it is not queued at such a rank."""
        return self._requeue(job, rank, False)

    def _requeue(self, job: Job, rank: int, up: bool) -> bool:
        with self.jobs.mutex:
            q = self.jobs.queue
            for k, item in enumerate(q):
                if item[2] is job:
                    if item[0] <= rank if up else item[0] >= rank:
                        return False
                    q[k] = (rank, item[1] if up else next(self._ids), job)
                    heapq.heapify(q)   # (the queue's heap, changed under its own lock)
                    if up and rank < LATER:
                        self.stirred = time.monotonic()
                    return True
        return False

    def _dispatch(self, i: int) -> None:
        while True:
            w = self.workers[i]
            if i and (w is None or w.proc.poll() is not None):   # (no worker running in slot i)
                item = self._wait_spare(i)
                if item is None:   # started ahead: take jobs as the others do
                    continue
            else:
                item = self.jobs.get()
            while True:   # (the best job by then may be one that waits: `_when_idle`)
                item = self._when_idle(item)
                item = self._unblocked(self._asked_lately(self._best_when_ready(i, item)))
                if self._waits(item) is None:
                    break
            job = item[2]
            if job is None or self.closed:
                if job is not None:
                    job._finish(False, SHUT_DOWN)
                return
            try:
                self._run(i, job, item[0])
            except Exception as exc:  # never let a dispatcher die with a job unfinished
                job._finish(False, f"{type(exc).__name__}: {exc}")

    def worker(self, i: int, use: bool = True) -> "_Worker":
        """Worker `i`, started if not running (under the lock: one process per slot). `use`:
        the caller gives it a job (`release_idle` then leaves it alone)."""
        with self._lock:
            w = self.workers[i]
            if w is None or w.proc.poll() is not None:
                if self.closed:
                    raise OSError("the compile pool was shut down")
                if w is not None:   # died between jobs (killed): reap it, close its pipes
                    w.kill()
                w = self.workers[i] = _Worker()
            w.used = w.used or use
            return w

    def release_idle(self) -> None:
        """Stop the workers that never had a job (started ahead for a compile that found
        everything on disk after all): their start-up would only take CPU from the caller."""
        with self._lock:
            self.ahead = False
            idle = [w for w in self.workers if w is not None and not w.used]
            self.workers = [None if w in idle else w for w in self.workers]
        for w in idle:
            w.kill()

    def _run(self, i: int, job: Job, rank: int = FIRST) -> None:
        # A job the program waits for (rank before LATER) counts as `compiling`; a LATER one
        # does not, so the program keeps its second thread.
        waited = rank < LATER
        _busy(1, waited)
        try:
            self._run_on(i, job)
        finally:
            _busy(-1, waited)
            if waited:   # (its kernel loads now, and the step may ask for the next one)
                self.stirred = time.monotonic()

    def _run_on(self, i: int, job: Job) -> None:
        """Run `job` on worker `i`; a worker that dies during it (a crash, a kill from
        outside) is replaced and the job sent again, up to `RESTARTS` times."""
        self.current[i] = job
        try:
            for attempt in range(RESTARTS + 1):
                why = self._attempt(i, job)
                if why is None or job.done():
                    return
                if attempt == RESTARTS or self.closed:
                    job._finish(False, f"{why}; tried {attempt + 1} times" if attempt else why)
                    return
                log.info("%s: %s; a new worker takes the job again", job.name_hint, why)
        finally:
            self.current[i] = None

    def _attempt(self, i: int, job: Job) -> Optional[str]:
        """One try of `job` on worker `i`: None when it finished (either way), else why
        the worker died under it (it is reaped and its slot emptied)."""
        try:
            w = self.worker(i)
        except (OSError, ValueError) as exc:
            job._finish(False, f"compile worker could not start ({exc})")
            return None
        try:
            w.send(job)
        except (OSError, ValueError) as exc:
            self.workers[i] = None
            w.kill()
            return f"compile worker unreachable ({exc})"
        deadline = time.monotonic() + _timeout()
        while True:
            try:
                reply = w.replies.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.workers[i] = None
                w.kill()
                # (not tried again: a job that hangs a worker would hang the next one)
                job._finish(False, f"compile worker hung (no answer within {_timeout():g} s); killed")
                return None
            if reply is None:
                code = w.proc.wait()
                self.workers[i] = None
                w.kill()
                return f"compile worker crashed (exit code {code})"
            if reply.get("id") == job.id:
                job._finish(bool(reply.get("ok")), reply.get("error", ""),
                            float(reply.get("seconds", 0.0)), int(reply.get("compiled", 0)))
                return None

    def take_queued(self) -> list:
        """Every job still queued, taken out of the queue (finish.hand_off)."""
        out = []
        while True:
            try:
                item = self.jobs.get_nowait()
            except queue.Empty:
                return out
            if item[2] is not None:
                out.append(item[2])

    def unfinished(self) -> list:
        """Every job submitted to this pool and not done yet, in the order submitted."""
        with self._lock:
            return [j for j in self.by_source.values() if not j.done()]

    def shutdown(self) -> None:
        self.closed = True
        # Jobs still queued are never taken now: finish them, or whoever waits on one (a
        # module's preparation thread, prepare._prepare) would wait for good.
        for job in self.take_queued():
            job._finish(False, SHUT_DOWN)
        for _ in self.workers:
            self.jobs.put((-1, next(self._ids), None))
        live = [w for w in self.workers if w is not None]
        for w in live:  # all at once: an exiting program waits at most ~0.5 s in total
            with contextlib.suppress(OSError, ValueError):
                w.proc.stdin.close()
        deadline = time.monotonic() + 0.5
        for w in live:
            w.close(grace=max(0.0, deadline - time.monotonic()))
        self.workers = [None] * len(self.workers)

    def forget_after_fork(self) -> None:
        """In a forked child: close our copies of the parent's pipes without touching its
        workers (they belong to the parent, which reaps them)."""
        for w in self.workers:
            if w is None:
                continue
            for f in (w.proc.stdin, w.proc.stdout):
                with contextlib.suppress(OSError, ValueError):
                    os.close(f.fileno())


_pool: Optional[CompilePool] = None
_inherited: list = []  # pools a forked child inherited: kept so their closed files are never collected
_pool_lock = threading.Lock()


def _get_pool() -> CompilePool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = CompilePool(pool_size())
        return _pool


def submit(source: str, name_hint: str, llvm_options: tuple = (), later: bool = False,
           rank: int | None = None, after: Optional[Job] = None, asked=None) -> Job:
    """Queue `source` for a worker; returns its `Job` (shared with identical ones). `later`
    (rank LATER) waits until the queue has settled; `rank` places it explicitly; `after`:
    taken once that job is done; `asked`: gives when the op last asked and its longest gap
    (`ASKED_WITHIN_S`)."""
    return _get_pool().submit(source, name_hint, llvm_options, later, rank, after, asked)


def promote(job: Job, rank: int) -> bool:
    """Move a queued `job` up to `rank` when it waits at a later one (a tier-0 kernel that
    eager code or a compiled step now asks for). False when nothing moved."""
    p = _pool
    if p is None or p.pid != os.getpid() or job.pid != os.getpid():
        return False
    return p.promote(job, rank)


def demote(job: Job, rank: int) -> bool:
    """Move a queued `job` down to `rank` (`LATER`) when it waits at an earlier one (a
    kernel only tier 0 and stand-ins ask for). False when nothing moved."""
    p = _pool
    if p is None or p.pid != os.getpid() or job.pid != os.getpid():
        return False
    return p.demote(job, rank)


def prestart() -> None:
    """Start the first worker now, before any job: it pays its 1-3 s start-up while the
    caller goes on. The others start when a core is idle. A no-op when they run."""
    pool = _get_pool()
    pool.ahead = len(pool.workers) > 1
    with contextlib.suppress(OSError, ValueError):   # (the dispatcher tries again, and reports)
        pool.worker(0, use=False)


def release_idle() -> None:
    """Stop the workers `prestart` started that have had no job yet (see CompilePool)."""
    p = _pool
    if p is not None and p.pid == os.getpid():
        p.release_idle()


def compiling() -> int:
    """How many workers are starting up or compiling a job the program waits for (a plain
    read for coreshare.ceding)."""
    return _in_flight


def running() -> int:
    """How many workers are starting up or compiling any job (a plain read)."""
    return _in_flight + _later


def worker_pids() -> list:
    """Process ids of the live workers (for tests and diagnostics)."""
    p = _pool
    if p is None or p.pid != os.getpid():
        return []
    return [w.proc.pid for w in p.workers if w is not None and w.proc.poll() is None]


def shutdown() -> None:
    """Stop and reap every worker (run at exit; safe to call twice)."""
    global _pool
    with _pool_lock:
        p, _pool = _pool, None
    if p is not None and p.pid == os.getpid():
        p.shutdown()


def _after_fork_in_child() -> None:
    global _pool, _pool_lock, _in_flight, _in_flight_lock, _later
    _pool_lock = threading.Lock()  # another thread may have held it at the fork
    _in_flight, _in_flight_lock = 0, threading.Lock()   # (the parent's jobs are not ours)
    _later = 0
    p, _pool = _pool, None
    if p is not None:
        p.forget_after_fork()
        _inherited.append(p)


_finishing: list = []   # workers finishing our jobs after we exit (finish.py): never reaped here


def _at_exit() -> None:
    """At a normal exit: hand the unfinished jobs to the workers (finish.py), then stop
    whatever worker has none."""
    p = _pool
    if p is not None and p.pid == os.getpid():
        from . import finish
        with contextlib.suppress(Exception):   # (never let an exit hook fail the program's exit)
            _finishing.extend(finish.hand_off(p))
    shutdown()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# The thread policy asks these counters (coreshare.ceding, its trials): given to it now, once
# every name above exists, never looked up by it.
from .cpu.runtime import coreshare as _coreshare  # noqa: E402
_coreshare.watch_compiles(compiling, running, worker_pids)
