"""How many threads compiled code should use, given what other processes take of the CPUs.

Why: numba's parallel kernels and OpenBLAS split each call over every core and wait for
the slowest thread; a thread behind another process's busy core waits a scheduler slice
at every synchronisation point (a 256x1024 @ 1024x10 product under load: 0.13 ms on one
BLAS thread, 11-16 ms on two). It follows the machine, as libgomp's ``OMP_DYNAMIC`` does.

What: `CoreShare.threads()` is the CPUs this process may use less the cores others kept
busy since the previous ``/proc/stat`` sample (at least ``INTERVAL`` apart, so a call is
a clock read almost always), at most the count `set_num_threads` set. `adapt()` applies
it to numba and BLAS, only on a change and never above their starting counts. A lowered count is tried again now and then
(`TRIAL_WINDOW`): a lower-priority process that only fills the core we leave idle reads
as busy exactly while we run one thread. `ceding()` keeps the program's second thread
idle while one of its compile workers compiles something it waits for.

``TRACEJIT_ADAPTIVE_THREADS=0`` turns `adapt` off; Linux only. `guard_parallel` also
serialises parallel launches under numba's ``workqueue`` layer, which aborts the process
on concurrent launches. `shorter_switches` shortens the GIL switch interval while a
background thread of ours runs Python beside the user's steps.
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

__all__ = ["CoreShare", "core_share", "adapt", "adapt_blas", "user_set", "ceding",
           "one_thread_always", "one_thread_now", "set_to_one", "blas_count_one", "blas_count_back",
           "gemm_threads", "blas_ceiling", "SMALL_GEMM_MNK", "FEW_ROWS",
           "FEW_ROWS_GEMM_MNK", "TINY_GEMM_MNK", "guard_parallel", "workqueue_active",
           "SWITCH_S", "shorter_switches"]

INTERVAL = 0.25         # seconds between two readings of /proc/stat
# The first count after the import-time reading may come this soon: a first step that
# starts 0.2 s after import would otherwise run on every CPU whatever the load.
FIRST_INTERVAL = 0.1
# Cores others may use before we give one up: at half a core the MLP step ran as fast on
# one thread as on two (22.5 / 22.6 ms).
SLACK = 0.5
# A lowered count is tried at the full count for `TRIAL_WINDOW` seconds: if others then
# stay below `SLACK`, they only filled our idle core and the full count stays; else the
# next trial waits twice as long, up to `TRIAL_BACKOFF_MAX`. No trial runs while our own
# compile workers work: they compete at our priority.
TRIAL_WINDOW = 0.1
TRIAL_BACKOFF_MIN = 0.5
TRIAL_BACKOFF_MAX = 8.0
# m*k*n below which a product runs on one BLAS thread even when the policy gives two: a
# load that starts between samples costs a small product 100x on two threads.
SMALL_GEMM_MNK = 1 << 20
# Products of fewer than `FEW_ROWS` rows below `FEW_ROWS_GEMM_MNK` also run on one thread:
# a second thread gains little, and both threads reading the weights makes the in-place
# update right after pull the lines back from the other core (two-layer step: ~20% less time).
FEW_ROWS = 128
FEW_ROWS_GEMM_MNK = 1 << 23
# m*k*n below which OpenBLAS keeps a product on one thread by itself (interface/gemm.c):
# `set_to_one` leaves the count alone there, as setting it costs 3.5 us a product.
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


# The compile workers' counters (compiling, running, worker_pids), registered by
# compiler/workers.py at the end of its import (`watch_compiles`); None before.
_compiles = None


def watch_compiles(compiling, running, worker_pids) -> None:
    """Let the policy ask the compile workers how many compile what the program waits for,
    how many run any job, and which are alive."""
    global _compiles
    _compiles = (compiling, running, worker_pids)


def _workers_running() -> int:
    """Compile workers of this process running any job now (0 before they are loaded)."""
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
        self.cpus = cpus or _threads.usable_cpus()   # (fixed: GEMM choice keys and conv blocks read it)
        self.machine = machine or os.cpu_count() or self.cpus   # CPUs /proc/stat counts
        self.interval = interval
        self.slack = slack
        self.others = 0.0          # cores other processes used over the last interval
        self._last = None
        self._count = self.cpus
        self._counted = False      # a count has been read (else FIRST_INTERVAL suffices)
        self._lock = threading.Lock()
        # `workers`: how many of our compile workers work now (injectable for tests)
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
                # All CPUs' busy time less our own per wall second: cores others use
                # (clamped: the counters tick every 10 ms)
                others = ((busy - last[1]) - (own - last[2])) / (now - last[0])
                self.others = min(max(0.0, others), float(self.machine))
                self._count = self._decide(self.count_for(self.others), now)
                self._counted = True
                self._set_wait()
            self._last = (now, busy, own)
        return self.others

    def reread(self, window: float = FIRST_INTERVAL) -> int:
        """The count read over the next `window` seconds alone (the caller sleeps), after a
        wait on background compiles: the reading in progress counted our compile workers
        as other processes and would hold one thread until the next sample."""
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
        """The count to use from a reading whose own count is `count`: the end of a trial,
        the start of one, or `count` itself."""
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
        # (`sample`'s test inlined: the count is asked at every launch)
        last = self._last
        if last is None or time.monotonic() - last[0] >= self._wait:
            self.sample()
        n = _threads._set[0]      # the `set_num_threads` ceiling (no system call per launch)
        return min(self._count, n) if n else self._count


core_share = CoreShare()


class _Setting:
    """One library's thread count as `adapt` manages it; the ceiling is the count found
    before we changed it, or the one someone else set since."""

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


_blas = None
_local = threading.local()   # numba's count is per Python thread
# Read once: `adapt` runs before every parallel kernel, an environment lookup costs 1 us.
ENABLED = sys.platform.startswith("linux") and not is_off("TRACEJIT_ADAPTIVE_THREADS")
if ENABLED:
    # A first reading at import, so that the user's first step already knows the load.
    core_share.sample()


def adapt() -> int:
    """Set numba's threads (for the calling thread) and BLAS's to what the machine gives
    now; returns the count (0 when turned off)."""
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
        import numba
        numba_setting = _local.numba = _Setting(numba.get_num_threads, numba.set_num_threads)
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
    """`adapt` for BLAS alone, for eager matmul (which must not import numba)."""
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


def user_set() -> None:
    """The user set the thread counts (`tracejit.set_num_threads`): the next `adapt` and
    `adapt_blas` apply the policy again, which takes the new counts as ceilings (`_Setting`;
    they skip the libraries while the policy's count stays the same). `CoreShare.threads`
    reads the new count as the pool's ceiling at each launch."""
    global _local, _blas_n
    _local = threading.local()
    _blas_n = None
    if _blas is not None:
        _blas.ours = None     # (a count equal to the one we set last is the user's too)


def _give_up(exc: Exception) -> None:
    global ENABLED
    ENABLED = False
    import warnings
    warnings.warn(f"tracejit: adaptive thread counts turned off after an error "
                  f"({type(exc).__name__}: {exc}); thread counts stay as they are",
                  RuntimeWarning, stacklevel=3)


def one_thread_always(m: int, k: int, n: int) -> bool:
    """Whether an (m, k) @ (k, n) product runs on one BLAS thread whatever the policy."""
    mnk = m * k * n
    return mnk < SMALL_GEMM_MNK or (m < FEW_ROWS and mnk < FEW_ROWS_GEMM_MNK)


def one_thread_now(m: int, k: int, n: int) -> bool:
    """Whether such a product runs on one BLAS thread where several are ours."""
    return _blas is not None and _blas.ours not in (None, 1) and one_thread_always(m, k, n)


def set_to_one(m: int, k: int, n: int) -> bool:
    """Whether blas_gemm.matmul sets BLAS's count to one around the product (not for
    products BLAS keeps on one thread by itself)."""
    return one_thread_now(m, k, n) and m * k * n >= TINY_GEMM_MNK


def blas_count_one() -> None:
    """Set BLAS's count to one for a product `set_to_one` chose."""
    _blas.put(1)


def blas_count_back() -> None:
    """BLAS's count back to the policy's after `blas_count_one`."""
    _blas.put(_blas.ours)


# While a compile worker starts or compiles a job the program waits for, the program's
# extra threads (a split recurrent loop's shares) stay idle: they took the worker's core
# in turns and each compile took longer.
_cede = envflags.flag("TRACEJIT_CEDE")   # (the switch: tests, A/B measurements)
def ceding() -> bool:
    """Whether the program leaves its second thread's core to its busy compile workers
    now (only where they leave it fewer than two CPUs)."""
    if not _cede():
        return False
    c = _compiles
    if c is None:
        return False
    n = c[0]()
    return n > 0 and core_share.cpus - n < 2


def blas_ceiling() -> int | None:
    """BLAS's thread count before `adapt` lowered it; None where no known BLAS is loaded."""
    if _blas is not None and _blas.ceiling is not None:
        return _blas.ceiling
    # (the module's attribute, read at the call: no import statement on a GEMM's path)
    return _threads.blas_threads()


@contextlib.contextmanager
def gemm_threads(m: int, k: int, n: int) -> Iterator[None]:
    """BLAS's thread count for (m, k) @ (k, n) products that code inside the block makes
    through numpy's BLAS itself: what eager `matmul` gives each."""
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
    """numba's threading layer (starting its thread pool)."""
    global _layer
    if _layer is None:
        from numba.np.ufunc import parallel
        parallel._launch_threads()
        _layer = parallel.threading_layer()
    return _layer


def workqueue_active() -> bool:
    return threading_layer() == "workqueue"


class _Adapted:
    """A parallel kernel that first sets the thread counts (`adapt`)."""

    __slots__ = ("unguarded",)

    def __init__(self, fn: Callable):
        self.unguarded = fn

    def __call__(self, *args):
        adapt()
        return self.unguarded(*args)

    def __getattr__(self, name):
        return getattr(self.unguarded, name)


def guard_parallel(fn: Callable) -> Callable:
    """`fn` (a parallel numba kernel), safe to call from several threads at once and run
    on the threads the machine gives now."""
    if not workqueue_active():
        return _Adapted(fn) if ENABLED else fn

    @functools.wraps(fn)
    def serialized(*args):
        with _LAUNCH_LOCK:
            adapt()
            return fn(*args)
    serialized.unguarded = fn
    return serialized


# ---------------------------------------------------------------- GIL switches
# A warm process's background work (planning, kernel loads) shares the GIL with the user's
# steps, and after each numpy call that releases it a step waits up to the switch interval
# (5 ms) to get it back (Transformer step under load: 603-706 ms of waiting, 464-469 at
# 0.5 ms). The previous interval comes back after the last block, unless someone else
# changed it meanwhile.
SWITCH_S = 0.0005
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved: Optional[float] = None   # the interval to put back, None when we did not change it


@contextlib.contextmanager
def shorter_switches() -> Iterator[None]:
    """Within the block, the GIL switch interval is at most `SWITCH_S`."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if _switch_users == 0:
            current = sys.getswitchinterval()
            _switch_saved = current if current > SWITCH_S else None
            if _switch_saved is not None:
                sys.setswitchinterval(SWITCH_S)
        _switch_users += 1
    try:
        yield
    finally:
        with _switch_lock:
            if _switch_users > 0:   # (0: a block entered before a fork, ending in the child)
                _switch_users -= 1
                if _switch_users == 0:
                    _restore_switches()


def _restore_switches() -> None:
    global _switch_saved
    if _switch_saved is not None and abs(sys.getswitchinterval() - SWITCH_S) < 1e-9:
        sys.setswitchinterval(_switch_saved)   # (a value someone else set meanwhile stays)
    _switch_saved = None


def _switches_after_fork() -> None:
    # The blocks running in the parent's other threads do not exist here: none runs.
    global _switch_users, _switch_lock
    _switch_lock = threading.Lock()
    _switch_users = 0
    _restore_switches()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_switches_after_fork)
