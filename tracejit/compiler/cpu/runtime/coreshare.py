"""How many threads compiled code should use, given what other processes take of the CPUs.

Why: numba's parallel kernels and numpy's BLAS (OpenBLAS) split each call over every
core and then wait for the slowest thread. When another process keeps a core busy, the
thread that lands behind it waits for a scheduler time slice (about 4 ms here), at every
synchronisation point of the call. Measured on a 2-core machine with the other core
busy (load average 6.6): a 256x1024 @ 1024x10 float32 product took 0.13 ms on one
BLAS thread and 11-16 ms on two; 64x1000 @ 1000x100, 0.14 ms against 60 ms;
256x1024 @ 1024x1024, 10 ms against 60 ms. On a quiet machine two threads are up to
twice as fast for the large products. Neither count is right everywhere, so it follows
the machine: this is libgomp's ``OMP_DYNAMIC`` idea (fewer threads when the load
average says cores are taken), measured more directly.

What: `CoreShare.threads()` returns the threads to use: the CPUs this process may run
on, less the cores other processes kept busy since the previous sample (from
``/proc/stat``, minus this process's own CPU time), rounded down once others take more
than ``SLACK`` of a core. Samples are at least ``INTERVAL`` seconds apart, so a call
costs a clock read almost always. `adapt()` applies the count to numba
(``numba.set_num_threads``, which holds for the calling thread) and to BLAS
(`threads.set_blas_threads`), changing them only when the count changes, and never above
the counts they started with. Products small enough that a second thread cannot pay
for its wake-up run on one BLAS thread whatever the load (`blas_threads_for`).

A count below the CPUs is tried again now and then (`TRIAL_WINDOW`, `TRIAL_BACKOFF_MIN`,
`TRIAL_BACKOFF_MAX`): the reading alone cannot tell a process that competes with ours from
one that only fills the core ours leaves idle and yields it as soon as ours wants it (a
process of lower priority: another autogroup's niced work against a program run at high
priority). The latter reads as a busy core exactly while the program runs one thread, and
the count stayed one for good: a self-fulfilling reading.

While a compile worker of this process starts up or compiles a kernel the program waits
for, `ceding()` is True and the program's second thread of its own (sharepool's partner:
claimed products, split recurrent loops) stays idle: the count above already gives the
program one thread then, but the partner took the worker's core in turns.

Whether the GEMM template or BLAS runs a product is the measured choice's
(compiler/cpu/gemm/choice.py); this module says on how many BLAS threads (`one_thread_always`,
`set_to_one`, `blas_ceiling`, `gemm_threads`), and the BLAS side
(compiler/cpu/gemm/blas_gemm.py `matmul`) reads it at every product.

``TRACEJIT_ADAPTIVE_THREADS=0`` (read at import) turns `adapt` into a no-op. Linux only
(elsewhere the counts stay what the libraries chose).

Parallel numba kernels launch through `guard_parallel`: `adapt` first (about 0.3-0.9 us),
and, under numba's ``workqueue`` threading layer only (where neither OpenMP nor TBB is
available, or with ``NUMBA_THREADING_LAYER=workqueue``), one launch at a time through a
process-wide lock: that layer is not thread-safe, and two threads launching parallel
kernels at once abort the process ("Concurrent access has been detected"). With the other
layers the wrapper costs nothing more.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from typing import Callable, Iterator, Optional


from .... import envflags
from ....envflags import is_off
from .... import threads as _threads
from ....threads import usable_cpus

__all__ = ["CoreShare", "core_share", "adapt", "adapt_blas", "ceding",
           "one_thread_always", "one_thread_now", "set_to_one", "blas_count_one", "blas_count_back",
           "gemm_threads", "blas_ceiling", "SMALL_GEMM_MNK", "FEW_ROWS",
           "FEW_ROWS_GEMM_MNK", "TINY_GEMM_MNK", "guard_parallel", "workqueue_active"]

INTERVAL = 0.25         # seconds between two readings of /proc/stat
# ... but the first count after the reading at import may come this soon: a user's first
# step can start 0.2 s after the import (bench_tiers' CNN probe: 0.19 s), and until a count
# it ran on every CPU whatever the load: its products' two BLAS threads at load 5-7 made
# the CNN's cold first step 200-500 ms (caller CPU 125-136 ms, OpenBLAS waiting for its
# descheduled worker) against 55-60 on one thread. 0.1 s of two CPUs' 10 ms ticks reads
# others' share to about a tenth of a core.
FIRST_INTERVAL = 0.1
# Cores others may use before we give one up. Half a core: with a competitor at our
# priority taking 40% of one core, the MLP step on 2 threads was 20.6 ms (median) against
# 22.6 on one; at 50-60% the two were even (22.5 / 22.6 ms), at a whole core one thread won
# (one process, alternating). 0.25 had given a core up at 40%.
SLACK = 0.5
# A count below the CPUs (others took a core over the last reading) is tried at the CPUs'
# count for `TRIAL_WINDOW` seconds: if others then keep below `SLACK` of a core, they only
# filled the core we left idle and gave it back when we asked (a lower-priority process),
# and the full count stays; else the count goes back down and the next trial waits twice
# as long, from `TRIAL_BACKOFF_MIN` up to `TRIAL_BACKOFF_MAX` seconds (a busy machine pays
# one window of two threads against a competitor per 8 s). Why: the cold CNN step (bench_tiers,
# its own autogroup at nice -20, another autogroup's nice-5 process spinning on the
# machine) ran its steady state either at 10.0-10.5 ms (two threads: the spinner yields,
# others read 0.04-0.2 cores) or at 14-16 ms (one thread: the spinner fills the idle core,
# others read 0.8), whichever count it happened to hold when its compile workers went idle.
# No trial runs while this process's compile workers work (`_workers_running`): they
# compete at our priority, and a trial would only slow their compile; the first trial
# comes at the first reading after they stop.
TRIAL_WINDOW = 0.1
TRIAL_BACKOFF_MIN = 0.5
TRIAL_BACKOFF_MAX = 8.0
# m*k*n below which a product runs on one BLAS thread even when the policy gives two (a
# guard for the samples' lag: a load that starts between two samples costs a small product
# 100x on two threads, a large one ~6x). 1M: on a near-quiet 2-core machine two threads ran
# 256x1024x10 in 71 us against 127, 128x1024x8 (1M) in 28 against 46, 64x1000x10 (0.64M)
# the same (OpenBLAS keeps such products on one thread itself); the MLP step with its three
# 2.6M products on two threads: 14.43 ms median against 14.65 (4M, 25 alternating rounds).
SMALL_GEMM_MNK = 1 << 20
# Products of fewer than `FEW_ROWS` rows below `FEW_ROWS_GEMM_MNK` run on one BLAS thread too,
# eager or compiled. OpenBLAS gains little from a second thread on them (64x1000x100: 84-90
# us on two threads against 104-110 on one, where 1000x64x100 takes 54-63 against 93-102),
# and both threads read all of B: the weights, which the update right after writes in place.
# Those writes must first take the lines back from the other core: numpy alone, the step's
# two products and then ``w -= lr * g`` (1000x100 float32) took 282-300 us (min) with both
# products on two threads (the update 114-132 us), 237-241 us with both on one (update 29
# us), 208-210 us with the forward product (64 rows) on one and the weight gradient's (1000
# rows) on two (update 35 us; 3 rounds, near-quiet, gemm15 notes). The two-layer step, policy
# at 2 threads, fresh processes alternating with the rule before (3 rounds, load 5.6-6.4): compiled
# 404-419 -> 323-325 us median, eager 454-457 -> 420-441 (PyTorch 296-302); the MLP step
# unchanged. It replaced an eager-only bound (8M: every eager product of the two-layer step on
# one thread, thr12's notes), which also kept the weight gradient's product on one.
FEW_ROWS = 128
FEW_ROWS_GEMM_MNK = 1 << 23
# m*k*n below which OpenBLAS runs a product on one thread by itself (interface/gemm.c: up to
# SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD = 65536 * 4; measured the same on one and two
# threads here up to 0.64M): blas_gemm.matmul leaves the count alone for them. Setting it to one and
# back costs 3.5 us a product (6.7 against 3.1 us for 64x100x10), and the two-layer step has
# three such products.
TINY_GEMM_MNK = 1 << 18


def _busy_seconds() -> float | None:
    """CPU seconds all processes spent busy since boot (/proc/stat's first line), over
    every CPU of the machine; None where there is no /proc."""
    try:
        with open("/proc/stat") as f:
            v = f.readline().split()
    except OSError:
        return None
    if not v or v[0] != "cpu":
        return None
    ticks = [int(x) for x in v[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user]
    busy = ticks[0] + ticks[1] + ticks[2] + sum(ticks[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


# What this process's compile workers do now, as their module (compiler/workers.py) reports
# it once it is loaded (`watch_compiles`): (compiling, running, worker_pids), each a function
# of no arguments; None before. The policy never looks a module up: one that another thread
# is still importing has none of its functions yet.
_compiles = None


def watch_compiles(compiling, running, worker_pids) -> None:
    """Let the policy ask the compile workers (compiler/workers.py registers its counters at
    the end of its import): `compiling()`, the workers starting up or compiling a job the
    program waits for; `running()`, any job; `worker_pids()`, the live workers."""
    global _compiles
    _compiles = (compiling, running, worker_pids)


def _workers_running() -> int:
    """Compile workers of this process starting up or compiling any job now; 0 before the
    workers' module is loaded."""
    c = _compiles
    return c[1]() if c is not None else 0


def workers_started() -> bool:
    """Whether this process has started compile workers."""
    c = _compiles
    return c is not None and bool(c[2]())


class CoreShare:
    """The cores left to this process, sampled from the whole machine's CPU time."""

    def __init__(self, cpus: int | None = None, interval: float = INTERVAL, slack: float = SLACK,
                 machine: int | None = None, workers=None):
        self.cpus = cpus or usable_cpus()
        self.machine = machine or os.cpu_count() or self.cpus   # CPUs /proc/stat counts
        self.interval = interval
        self.slack = slack
        self.others = 0.0          # cores other processes used over the last interval
        self._last = None
        self._count = self.cpus
        self._counted = False      # a count has been read (else FIRST_INTERVAL suffices)
        self._lock = threading.Lock()
        # Trials of the full count (`TRIAL_WINDOW`): `workers` says how many of this
        # process's compile workers work now (injectable for tests).
        self._workers = workers or _workers_running
        self._in_trial = False
        self._trial_at = None      # monotonic time from which the next trial may start
        self._backoff = TRIAL_BACKOFF_MIN
        self.trials = 0            # trials started (diagnostics, tests)
        self.trials_kept = 0       # trials whose full count stayed
        self._wait = min(self.interval, FIRST_INTERVAL)   # seconds from a reading to the next

    def _set_wait(self) -> None:
        # (an attribute, not a method: `threads` reads it at every launch)
        if self._in_trial:
            self._wait = min(self.interval, TRIAL_WINDOW)
        else:
            self._wait = self.interval if self._counted else min(self.interval, FIRST_INTERVAL)

    def sample(self, now: float | None = None) -> float:
        """Read the counters if `interval` has passed; returns ``others`` (cores)."""
        now = time.monotonic() if now is None else now
        last = self._last
        if last is not None and now - last[0] < self._wait:
            return self.others
        with self._lock:
            busy = _busy_seconds()
            if busy is None:
                return self.others
            own = _own_seconds()
            if last is not None and now > last[0]:
                # All CPUs' busy time less our own, per second of wall time: cores in use by
                # others (the machine may have more CPUs than we may use: count them all).
                others = ((busy - last[1]) - (own - last[2])) / (now - last[0])
                # (clamped: the counters tick every 10 ms, a short interval reads coarsely)
                self.others = min(max(0.0, others), float(self.machine))
                self._count = self._decide(self.count_for(self.others), now)
                self._counted = True
                self._set_wait()
            self._last = (now, busy, own)
        return self.others

    def reread(self, window: float = FIRST_INTERVAL) -> int:
        """The count read over the next `window` seconds alone (the calling thread sleeps
        through them), for the end of a wait on this process's background compiles
        (kernels/vectorized.settle): the reading in progress counted the compile workers as
        other processes, and its count (one thread on two CPUs) would hold until the next
        sample, up to `INTERVAL` after the workers were done: a whole timed run of the
        bench's eager rows (opcost's 1M-element ops: 15 calls of 2-5 ms)."""
        with self._lock:
            busy = _busy_seconds()
            if busy is None:
                return self._count
            self._last = (time.monotonic(), busy, _own_seconds())
            self._counted = False      # the next sample may come `FIRST_INTERVAL` after this
            self._set_wait()
        time.sleep(window)
        return self.threads()

    def _decide(self, count: int, now: float) -> int:
        """The count to use from a reading whose own count is `count` (`count_for`): the
        end of a trial, the start of one, or `count` itself."""
        full = self.cpus
        if self._in_trial:           # the reading covers the trial's window alone
            self._in_trial = False
            if count >= full:        # others gave the core back: keep it
                self.trials_kept += 1
                self._backoff = TRIAL_BACKOFF_MIN
                self._trial_at = None
            else:                    # they compete: back down, and wait longer next time
                self._backoff = min(2 * self._backoff, TRIAL_BACKOFF_MAX)
                self._trial_at = now + self._backoff
            return count
        if count >= full:
            self._trial_at = None
            return count
        if self._workers():
            # our own compile workers take the core: try when they stop, at once
            self._backoff = TRIAL_BACKOFF_MIN
            self._trial_at = now
            return count
        if self._trial_at is None:
            self._trial_at = now + self._backoff
            return count
        if now >= self._trial_at:
            self._in_trial = True
            self.trials += 1
            return full
        return count

    def count_for(self, others: float) -> int:
        """Threads to use when others keep `others` cores busy."""
        free = min(self.cpus, self.machine - others)
        return max(1, min(self.cpus, int(free + self.slack)))

    def threads(self) -> int:
        # (`sample`'s own test first, here: a call of it costs ~0.3 us on caches a step's
        # products swept, and the two-layer step asks the count at every launch; the test
        # passes for all but one call in `interval`)
        last = self._last
        if last is None or time.monotonic() - last[0] >= self._wait:
            self.sample()
        return self._count


core_share = CoreShare()


class _Setting:
    """One library's thread count as `adapt` manages it: the ceiling is the count found
    before we changed anything, or the one someone else set since (theirs wins)."""

    def __init__(self, get, put):
        self.get, self.put = get, put
        self.ceiling = None
        self.ours = None          # the count we set last

    def apply(self, n: int) -> None:
        current = self.get()
        if current is None:
            return
        if self.ours is None or current != self.ours:
            self.ceiling = current   # first use, or changed by someone else: new ceiling
        want = max(1, min(n, self.ceiling))
        if want != current:
            self.put(want)
        self.ours = want


def _numba_setting() -> _Setting:
    import numba
    return _Setting(numba.get_num_threads, numba.set_num_threads)


_blas = None
_local = threading.local()   # numba's count is per Python thread
# Read once: `adapt` runs before every parallel kernel, an environment lookup costs 1 us.
ENABLED = sys.platform.startswith("linux") and not is_off("TRACEJIT_ADAPTIVE_THREADS")
if ENABLED:
    # A first reading at import: the first product (a user's first step, typically a
    # second later) then already knows what other processes take. Without it the first
    # samples only start the clock, and under load a first MLP step ran its products and
    # BLAS's spinning threads on two cores others held: 480-510 ms against 170-350 ms.
    core_share.sample()


def adapt() -> int:
    """Set numba's threads (for the calling thread) and BLAS's to what the machine can
    give now; returns the count (0 when turned off). Cheap: a clock read unless a
    sample is due or the count changed."""
    if not ENABLED:
        return 0
    n = core_share.threads()
    if getattr(_local, "n", None) == n:
        return n      # nothing changed here since (a count set by others meanwhile stays)
    try:
        _apply(n)
    except Exception as exc:   # a tuning must never fail the kernel it runs before
        _give_up(exc)
        return 0
    _local.n = n
    return n


def _apply(n: int) -> None:
    numba_setting = getattr(_local, "numba", None)
    if numba_setting is None:
        numba_setting = _local.numba = _numba_setting()
    numba_setting.apply(n)
    _blas_setting().apply(n)


def _blas_setting() -> _Setting:
    global _blas
    if _blas is None:
        from ....threads import blas_threads, set_blas_threads
        _blas = _Setting(blas_threads, set_blas_threads)
    return _blas


_blas_n = None


def adapt_blas() -> int:
    """`adapt` for BLAS alone: what eager matmul calls (it must not import numba or start
    its thread pool: 0.5 s on the first eager product)."""
    global _blas_n
    if not ENABLED:
        return 0
    n = core_share.threads()
    if _blas_n == n and _blas is not None:
        return n
    try:
        _blas_setting().apply(n)
    except Exception as exc:
        _give_up(exc)
        return 0
    _blas_n = n
    return n


def _give_up(exc: Exception) -> None:
    global ENABLED
    ENABLED = False
    import warnings
    warnings.warn(f"tracejit: adaptive thread counts turned off after an error "
                  f"({type(exc).__name__}: {exc}); thread counts stay as they are",
                  RuntimeWarning, stacklevel=3)


def one_thread_always(m: int, k: int, n: int) -> bool:
    """Whether an (m, k) @ (k, n) product runs on one BLAS thread whatever the policy gives
    (`SMALL_GEMM_MNK`; `FEW_ROWS` below `FEW_ROWS_GEMM_MNK`)."""
    mnk = m * k * n
    return mnk < SMALL_GEMM_MNK or (m < FEW_ROWS and mnk < FEW_ROWS_GEMM_MNK)


def one_thread_now(m: int, k: int, n: int) -> bool:
    """Whether an (m, k) @ (k, n) product runs on one BLAS thread where several are ours
    (`blas_threads_for`: waking the pool costs a small product more than it saves)."""
    return _blas is not None and _blas.ours not in (None, 1) and one_thread_always(m, k, n)


def set_to_one(m: int, k: int, n: int) -> bool:
    """Whether the BLAS side (compiler/cpu/gemm/blas_gemm.py `matmul`) must set BLAS's count
    to one around the product: `one_thread_now`, unless the product is so small that BLAS
    keeps it on one thread by itself."""
    return one_thread_now(m, k, n) and m * k * n >= TINY_GEMM_MNK


def blas_count_one() -> None:
    """Set BLAS's count to one for a product `set_to_one` chose (the policy holds several
    threads then); `blas_count_back` after it."""
    _blas.put(1)


def blas_count_back() -> None:
    """BLAS's count back to the policy's after `blas_count_one`."""
    _blas.put(_blas.ours)


# While a compile worker of this process starts up or compiles a job the program waits for
# (rank before LATER: a background compile's kernels, which tier 0 and the first compiled
# steps wait for; an op's kernel), the program's second thread (sharepool's partner: claimed
# products, split loops) is not used: the policy already gives the program one thread then
# (the worker counts as another process), but the partner took the worker's core in turns
# all the same (it moves off its launcher's CPU: onto the worker's; cold MLP step on a quiet
# machine: the partner 0.33 of a core, the worker 0.63) and each compile took longer.
# _cede(): the switch (tests, measurements).
_cede = envflags.flag("TRACEJIT_CEDE")   # (the switch: tests, A/B measurements)
def ceding() -> bool:
    """Whether the program leaves its second thread's core to its compile workers now: a
    worker of this process starts up or compiles a job the program waits for
    (compiler/workers.compiling), and the CPUs we may use less those workers leave fewer
    than two (a 2-core machine)."""
    if not _cede():
        return False
    c = _compiles
    if c is None:
        return False
    n = c[0]()
    # (only where the busy workers leave the program fewer than its two threads' cores: on a
    # machine with cores to spare the partner takes none of theirs)
    return n > 0 and core_share.cpus - n < 2


def blas_ceiling() -> int | None:
    """BLAS's thread count before `adapt` lowered it (the count it started with, or the one
    someone else set since): the count a quiet machine gives every large product. None
    where no known BLAS is loaded."""
    if _blas is not None and _blas.ceiling is not None:
        return _blas.ceiling
    # (the module's attribute, read at the call: no import statement on a GEMM's path)
    return _threads.blas_threads()


@contextlib.contextmanager
def gemm_threads(m: int, k: int, n: int) -> Iterator[None]:
    """BLAS's thread count for (m, k) @ (k, n) products made inside the block by code that
    calls numpy's BLAS itself (the recurrent layers' loop kernels, compiler/cpu/gemm/blas_gemm.py): what
    eager `matmul` (compiler/cpu/gemm/blas_gemm.py) gives each such product."""
    if not (adapt_blas() and set_to_one(m, k, n)):
        yield
        return
    _blas.put(1)
    try:
        yield
    finally:
        _blas.put(_blas.ours)


# ---------------------------------------------------------------- parallel kernels
_LAUNCH_LOCK = threading.Lock()
_layer: Optional[str] = None


def threading_layer() -> str:
    """The threading layer numba uses for parallel kernels (starting its thread pool,
    which the first parallel kernel would do anyway)."""
    global _layer
    if _layer is None:
        from numba.np.ufunc import parallel
        parallel._launch_threads()
        _layer = parallel.threading_layer()
    return _layer


def workqueue_active() -> bool:
    return threading_layer() == "workqueue"


class _Adapted:
    """A parallel kernel that first sets the thread counts to the cores other processes
    leave us (`coreshare.adapt`); other attributes are the kernel's."""

    __slots__ = ("unguarded",)

    def __init__(self, fn: Callable):
        self.unguarded = fn

    def __call__(self, *args):
        adapt()
        return self.unguarded(*args)

    def __getattr__(self, name):
        return getattr(self.unguarded, name)


def guard_parallel(fn: Callable) -> Callable:
    """`fn` (a parallel numba kernel), made safe to call from several threads at once, and
    run on the threads the machine can give it now (`adapt`)."""
    if not workqueue_active():
        return _Adapted(fn) if ENABLED else fn

    @functools.wraps(fn)
    def serialized(*args):
        with _LAUNCH_LOCK:
            adapt()
            return fn(*args)
    serialized.unguarded = fn
    return serialized
