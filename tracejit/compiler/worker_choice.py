"""How the compile pool picks a worker's next job (workers.py `CompilePool`, of which
`JobChoice` is a part): held jobs wait for an idle core or a waiter, LATER jobs for a
settled queue, an op's kernel that its op stopped asking for goes back once, a job whose
prerequisite still compiles waits for it, and a second worker starts only on a spare core.
The thresholds and readings are workers.py's (tests set them there)."""
from __future__ import annotations

import heapq
import queue
import time
from typing import Optional

__all__ = ["JobChoice"]


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
        taken out of the queue; None when every queued job must wait (a held one would
        only be swapped for another). Not the queue's head alone: a held job put back goes
        behind the jobs of its rank queued by then, and a job queued after it, at that rank,
        waited behind it: a job asked at every step (a GEMM configuration's module, rank
        LATER) would otherwise wait behind held jobs for as long as the step runs."""
        with self.jobs.mutex:
            q = self.jobs.queue
            # (sequence numbers are unique: jobs never compared. A stop is left for a
            # dispatcher waiting on the queue: the pool is closed by then, which the caller
            # sees at its next look, and finishes the job it holds)
            for item in sorted(q):
                if item[2] is not None and self._waits(item) is None:
                    q.remove(item)
                    heapq.heapify(q)   # (the queue's heap, changed under its own lock)
                    return item
        return None

    def _when_idle(self, item: tuple) -> tuple:
        """`item`, once its job may run: at once unless it must wait (`_waits`); a held one
        (`Job.hold`) when a core is free over `HOLD_IDLE_WINDOWS` windows
        (`_CPUReading.free`), a LATER one no one holds once the queue settled
        (`LATER_SETTLE_S`), either while a caller waits (`waiting`). A queued job that need
        not wait (queued meanwhile, or behind held ones: `_take_runnable`) is taken instead
        (the waiting one goes back at its rank, behind the jobs of that rank queued by then:
        at its old place among them, a held job ahead of one that may run would come
        straight back, and the two would be swapped without end)."""
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
        queued by then: the jobs submitted meanwhile go by rank (a background compile's plan
        kernels before fused Adam's, submitted a moment earlier)."""
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
        """`item`, or when it is an op's kernel (a job with `Job.asked`) whose op has not
        asked for it within `ASKED_WITHIN_S`, the next queued job, that one back in the
        queue with rank LATER and held (once: it is then taken in its turn like any LATER
        job, once a core is idle or its op asks again). A LATER one too: a kernel only
        tier-0 forwards asked for (compiler/cpu/kernels/loader.py, compiler/cpu/kernels/vectorized.py) whose op stopped asking
        when the entry switched, which would otherwise compile beside the training step
        that never asks for it (MLP step: LayerNorm's kernels and eager GELU's, ~0.75 s of
        worker CPU after the step's own kernels were in)."""
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
        """`item`, or when its job must wait for another one (`Job.after`) still compiling
        in another worker, the next queued job that need not (the waiting ones go back to
        the queue); with none queued, waits for the first one's prerequisite."""
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

    def _running(self, i: int) -> bool:
        w = self.workers[i]
        return w is not None and w.proc.poll() is None

    def _wait_spare(self, i: int) -> Optional[tuple]:
        """For slot `i`, whose worker is not running: wait until the program leaves a core
        idle (`spare_core`) and jobs wait (then take the next one) or `prestart` asked for
        workers (then start ours ahead and return None); the running workers take the jobs
        meanwhile. A stop at once when the pool closes."""
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
                    # `release_idle` may have come while spare_core() measured (a plan that
                    # found every kernel on disk): nothing to start ahead for any more, and
                    # a worker started now would outlive it, idle.
                    if not self.ahead:
                        continue
                    self.ahead = False
                    try:
                        self.worker(i, use=False)
                    except (OSError, ValueError):
                        pass   # tried again (and reported) with a job
                return None
            time.sleep(_w.SPARE_WINDOW_S)


# (at the end: workers.py imports this module at its start, either may be imported first)
from . import workers as _w  # noqa: E402
