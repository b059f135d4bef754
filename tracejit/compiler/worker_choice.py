"""How the compile pool picks a worker's next job (workers.py `CompilePool`, of which
`JobChoice` is a part): held jobs wait for an idle core or a waiter, LATER jobs for a
settled queue, an op's kernel that its op stopped asking for goes back once, a job whose
prerequisite still compiles waits for it, and a second worker starts only on a spare core.
The thresholds are workers.py's (tests set them there). Also the `Job` itself and the
program's CPU reading the choice is made from (`_CPUReading`)."""
from __future__ import annotations

import contextlib
import heapq
import os
import queue
import threading
import time
from typing import Optional

from ..threads import usable_cpus

__all__ = ["JobChoice", "Job"]


class Job:
    """One kernel module to compile; `event` is set when it is done (`ok` says how)."""

    __slots__ = ("id", "source", "name_hint", "llvm_options", "event", "ok", "error", "seconds",
                 "compiled", "pid", "after", "asked", "hold")

    def __init__(self, jid: int, source: str, name_hint: str, llvm_options: tuple,
                 after: "Optional[Job]" = None, asked=None):
        self.id = jid
        self.source = source
        self.name_hint = name_hint
        self.llvm_options = tuple(llvm_options)
        self.event = threading.Event()
        self.ok = False
        self.error = ""
        self.seconds = 0.0
        self.compiled = 0
        self.pid = os.getpid()
        # a job whose module loads this one's (a row kernel's pair, cshares.py): a worker
        # takes it once this one is done, else it would compile that module again
        self.after = after
        # an eager op's kernel: ``asked()`` is (the time.monotonic() of the op's latest call
        # that found it not loaded or None, the longest time between two such calls); see
        # `CompilePool._asked_lately`
        self.asked = asked
        # a job no one waits for (`CompilePool._when_idle`): ``hold()`` is True while it
        # should wait for a core the program leaves idle; None once it may run
        self.hold = None

    def done(self) -> bool:
        return self.event.is_set()

    def lost(self) -> bool:
        """Submitted by the process we were forked from: it will never finish here."""
        return self.pid != os.getpid() and not self.event.is_set()

    def blocked(self) -> bool:
        """Whether its prerequisite (`after`) is still compiling here."""
        return self.after is not None and not self.after.done() and not self.after.lost()

    def _finish(self, ok: bool, error: str = "", seconds: float = 0.0, compiled: int = 0) -> None:
        self.ok, self.error, self.seconds, self.compiled = ok, error, seconds, compiled
        self.event.set()


def _thread_clocks() -> dict:
    """CPU seconds so far of tracejit's own background threads (planning, loads, compile
    dispatch: the threads named ``tracejit-...``)."""
    out = {}
    for t in threading.enumerate():
        if t.name.startswith("tracejit-") and t.ident:
            try:
                out[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (AttributeError, OSError, TypeError, ValueError):
                continue
    return out


class _CPUReading:
    """The program's CPU time since the reading began: the process's less tracejit's own
    background threads' (planning, loads, compile dispatch); the program's threads and
    BLAS's count. `cores()`: how many cores it kept busy on average since; `others()`: how
    many other processes did (our compile workers included; coreshare's reading)."""

    def __init__(self):
        from .cpu.runtime.coreshare import _busy_seconds, _own_seconds
        self.t, self.p, self.c = time.monotonic(), time.process_time(), _thread_clocks()
        self.busy, self.own = _busy_seconds(), _own_seconds()

    def cores(self) -> float:
        t, p, c = time.monotonic(), time.process_time(), _thread_clocks()
        ours = sum(c[k] - self.c[k] for k in self.c.keys() & c.keys())
        return max(0.0, (p - self.p) - ours) / max(t - self.t, 1e-3)

    def others(self) -> float:
        from .cpu.runtime.coreshare import _busy_seconds, _own_seconds
        busy = _busy_seconds()
        if busy is None or self.busy is None:
            return 0.0     # (no /proc: the program's own reading decides)
        dt = max(time.monotonic() - self.t, 1e-3)
        return max(0.0, (busy - self.busy) - (_own_seconds() - self.own)) / dt

    def free(self) -> float:
        """Cores neither the program nor another process used since the reading began."""
        others = self.others()
        return min(usable_cpus(), (os.cpu_count() or 1) - others) - self.cores()


class JobChoice:
    """CompilePool's choice of jobs: its methods use the pool's state (`CompilePool.__init__`)."""

    def _held(self, item: tuple) -> Optional[_w.Job]:
        """The job of `item` when it must still wait for an idle core (`Job.hold`), else None."""
        job = item[2]
        if job is None or self.closed or job.hold is None:
            return None
        if not job.hold():
            job.hold = None
            return None
        return job

    def _unsettled(self, item: tuple) -> Optional[_w.Job]:
        """The job of `item` when it is a LATER one that must still wait for the queue to
        settle (`LATER_SETTLE_S`), else None."""
        job = item[2]
        if (job is None or item[0] != _w.LATER or self.closed or _w._waiters
                or time.monotonic() - self.stirred >= _w.LATER_SETTLE_S):
            return None
        return job

    def _waits(self, item: tuple) -> Optional[_w.Job]:
        """The job of `item` when it must still wait: held (`_held`) or not settled
        (`_unsettled`); else None."""
        return self._held(item) or self._unsettled(item)

    def _take_runnable(self) -> Optional[tuple]:
        """The first queued item (by rank, then sequence) whose job need not wait (`_waits`),
        taken out of the queue; None when every queued job must wait. Not the head alone:
        a job asked at every step would otherwise wait behind held jobs for good."""
        with self.jobs.mutex:
            q = self.jobs.queue
            # (sequence numbers are unique: jobs never compared; a stop is left for a
            # dispatcher waiting on the queue)
            for item in sorted(q):
                if item[2] is not None and self._waits(item) is None:
                    q.remove(item)
                    heapq.heapify(q)   # (the queue's heap, changed under its own lock)
                    return item
        return None

    def _when_idle(self, item: tuple) -> tuple:
        """`item`, once its job may run: at once unless it must wait; a held one when a core
        is free over `HOLD_IDLE_WINDOWS` windows, a LATER one once the queue settled, either
        while a caller waits. A queued job that need not wait is taken instead (the waiting
        one goes back behind its rank's jobs, so two never swap without end)."""
        job = self._waits(item)
        since, why = time.monotonic(), "a caller waits"
        reading, idle = None, 0
        while job is not None:
            if _w._waiters:
                break
            if self.closed:   # (`_dispatch` finishes it: never put back after shutdown's drain)
                return item
            runnable = self._take_runnable()
            if runnable is not None:
                self.jobs.put((item[0], next(self._ids), item[2]))
                item, job = runnable, None
                break
            time.sleep(_w.HOLD_POLL_S)
            if job.hold is None:    # not held: it waits for the queue to settle alone
                job = self._unsettled(item)
                if job is None:
                    _w.log.info("%s: waited %.2f s for the queue to settle, now compiling",
                             item[2].name_hint, time.monotonic() - since)
                continue
            now = time.monotonic()
            if reading is None:
                if now - since >= _w.HOLD_SETTLE_S:
                    reading = _w._CPUReading()
            elif now - reading.t >= _w.SPARE_WINDOW_S:
                free = reading.free()
                idle = idle + 1 if free >= _w.SPARE_IDLE_CORES else 0
                if idle >= _w.HOLD_IDLE_WINDOWS:
                    why = f"{free:.2f} cores free"
                    break
                reading = _w._CPUReading()
            job = self._waits(item)
        if job is not None:
            job.hold = None
            _w.log.info("%s: held %.2f s, now compiling (%s)", job.name_hint,
                     time.monotonic() - since, why)
        return item

    def _best_when_ready(self, i: int, item: tuple) -> tuple:
        """Hold a taken job until worker `i` has started up (1-2 s), then take the best one
        queued by then."""
        if item[2] is None or self.closed:
            return item
        try:
            w = self.worker(i)
        except (OSError, ValueError):
            return item   # `_run` reports it
        if w.ready.is_set():
            return item
        w.ready.wait(_w._timeout())
        self.jobs.put(item)
        return self.jobs.get()

    def _asked_lately(self, item: tuple) -> tuple:
        """`item`, or when it is an op's kernel whose op has not asked for it within
        `ASKED_WITHIN_S`, the next queued job, that one going back once at rank LATER, held
        (a tier-0 kernel the compiled step never asks for would compile beside the step)."""
        while item[2] is not None and item[0] in (_w.STEADY, _w.EAGER, _w.LATER) and item[2].asked is not None:
            job = item[2]
            last, gap = job.asked()
            if last is None or not _w._quiet_since(last, gap):
                break
            asked, job.asked = job.asked, None
            # held (`_when_idle`) until the program leaves a core idle or its op asks again
            job.hold = lambda a=asked: _w._not_asking(a)
            self.jobs.put((_w.LATER, next(self._ids), job))   # (behind the LATER ones queued)
            item = self.jobs.get()
        return item

    def _unblocked(self, item: tuple) -> tuple:
        """`item`, or when its job waits for another (`Job.after`) still compiling, the next
        queued job that need not; with none queued, waits for the prerequisite."""
        held = []
        while item[2] is not None and item[2].blocked():
            held.append(item)
            try:
                item = self.jobs.get_nowait()
            except queue.Empty:
                item = held.pop(0)
                item[2].after.event.wait(_w._timeout())
                break
        for h in held:
            self.jobs.put(h)
        return item

    def _wait_spare(self, i: int) -> Optional[tuple]:
        """For slot `i`, whose worker is not running: wait until a core is idle and jobs wait
        (then take the next one) or `prestart` asked (then start ahead and return None). A
        stop at once when the pool closes."""
        while True:
            if self.closed:
                return (-1, 0, None)
            if (self.jobs.qsize() or self.ahead) and _w.spare_core():
                if self.jobs.qsize():
                    try:
                        return self.jobs.get_nowait()
                    except queue.Empty:
                        continue
                with self._lock:
                    # `release_idle` may have come meanwhile: a worker started now would
                    # outlive it, idle
                    if not self.ahead:
                        continue
                    self.ahead = False
                    with contextlib.suppress(OSError, ValueError):   # (tried again with a job)
                        self.worker(i, use=False)
                return None
            time.sleep(_w.SPARE_WINDOW_S)


# (at the end: workers.py imports this module at its start, either may be imported first)
from . import workers as _w  # noqa: E402
