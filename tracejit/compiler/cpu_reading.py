"""The program's CPU time over a window: the process's less tracejit's own background
threads' (the compile pool's `spare_core` and held jobs read it, workers.py)."""
from __future__ import annotations

import os
import threading
import time

from ..threads import usable_cpus

__all__: list = []   # (workers.py's)


_PROGRAM_THREADS = ("tracejit-partner",)


def _thread_clocks() -> dict:
    """CPU seconds so far of tracejit's own background threads (planning, loads, compile
    dispatch: the threads named ``tracejit-...`` but the partner, compiler/cpu/runtime/sharepool.py,
    which runs the program's work)."""
    out = {}
    for t in threading.enumerate():
        if t.name.startswith("tracejit-") and t.name not in _PROGRAM_THREADS and t.ident:
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
