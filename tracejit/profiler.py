"""``tracejit.profiler``: where eager time goes, with torch.profiler's API.

Inside ``with profile() as prof:`` every op an eager call runs (forward and backward,
in the thread that entered) is timed as one event named after its primitive, and
``record_function("name")`` ranges group them; ``prof.key_averages().table()`` prints
the totals, ``prof.export_chrome_trace(path)`` writes the timeline for
chrome://tracing or Perfetto. A ``schedule`` records only some steps (``prof.step()``
ends one), and ``on_trace_ready`` is called at the end of each recorded cycle
(``tensorboard_trace_handler(dir)`` writes a trace file there).

The hook costs nothing while no profiler is on: dispatch looks for a profiler only on
the branch it already takes when a tracer is active (ops/eager.py). A compiled call
runs its kernels without dispatch, so it shows only inside the ranges around it.
"""
from __future__ import annotations

import enum
import functools
import json
import os
import socket
import time
from typing import Callable, Iterable, Optional

from .ops import eager as _eager

__all__ = ["profile", "record_function", "schedule", "ProfilerActivity", "ProfilerAction",
           "tensorboard_trace_handler", "FunctionEvent", "EventList"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1
    XPU = 2
    MTIA = 3
    PrivateUse1 = 4


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
             skip_first_wait: int = 0) -> Callable[[int], ProfilerAction]:
    """torch.profiler.schedule: skip `skip_first` steps, then cycles of `wait` idle,
    `warmup` and `active` recorded steps (the last saves), `repeat` times (0: forever)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError(f"schedule: wait, warmup, repeat and skip_first must be >= 0 and active > 0, "
                         f"got wait={wait}, warmup={warmup}, active={active}, repeat={repeat}, "
                         f"skip_first={skip_first}")

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait       # the first cycle starts with its warm-up
        cycle = wait + warmup + active
        if repeat and step >= cycle * repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if pos == cycle - 1 else ProfilerAction.RECORD
    return action


class FunctionEvent:
    """One timed op or range: name, start and end (µs since the profile started), the
    input shapes (with ``record_shapes``) and the events inside it."""
    __slots__ = ("name", "start_us", "end_us", "input_shapes", "children", "parent")

    def __init__(self, name: str, start_us: float, input_shapes=None, parent=None):
        self.name, self.start_us, self.end_us = name, start_us, start_us
        self.input_shapes, self.children, self.parent = input_shapes, [], parent

    @property
    def cpu_time_total(self) -> float:
        return self.end_us - self.start_us

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.children)

    def __repr__(self) -> str:
        return f"<FunctionEvent {self.name} {self.cpu_time_total:.1f}us>"


class _Average:
    """Totals over the events of one name (and input shapes, when grouped by them)."""

    def __init__(self, key: str, input_shapes=None):
        self.key, self.input_shapes = key, input_shapes
        self.count, self.cpu_time_total, self.self_cpu_time_total = 0, 0.0, 0.0

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / max(self.count, 1)

    def __repr__(self) -> str:
        return f"<FunctionEventAvg {self.key} count={self.count} cpu_time_total={self.cpu_time_total:.1f}us>"


def _us(x: float) -> str:
    return f"{x / 1e6:.3f}s" if x >= 1e6 else f"{x / 1e3:.3f}ms" if x >= 1e3 else f"{x:.3f}us"


class EventList(list):
    """A list of events or averages, with torch's ``table``."""

    def table(self, sort_by: Optional[str] = None, row_limit: int = 100, max_name_column_width: int = 55,
              header: Optional[str] = None, top_level_events_only: bool = False, **_ignored) -> str:
        rows = list(self)
        known = (None, "self_cpu_time_total", "cpu_time", "count")
        key = sort_by if sort_by in known else "cpu_time_total"
        if key is not None:
            rows.sort(key=lambda r: getattr(r, key), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total_self = sum(getattr(r, "self_cpu_time_total", 0.0) for r in self) or 1.0
        name_w = min(max([len("Name")] + [len(getattr(r, "key", getattr(r, "name", ""))) for r in rows]),
                     max_name_column_width)
        cols = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        shapes = any(getattr(r, "input_shapes", None) is not None for r in rows)
        line = "-" * name_w + "  " + "  ".join("-" * 12 for _ in cols)
        out = [header] if header else []
        out += [line, f"{'Name':>{name_w}}  " + "  ".join(f"{c:>12}" for c in cols)
                + ("  Input Shapes" if shapes else ""), line]
        for r in rows:
            name = getattr(r, "key", None) or r.name
            count = getattr(r, "count", 1)
            vals = [f"{100 * r.self_cpu_time_total / total_self:.2f}%", _us(r.self_cpu_time_total),
                    f"{100 * r.cpu_time_total / total_self:.2f}%", _us(r.cpu_time_total),
                    _us(r.cpu_time_total / max(count, 1)), str(count)]
            out.append(f"{name[:name_w]:>{name_w}}  " + "  ".join(f"{v:>12}" for v in vals)
                       + (f"  {r.input_shapes if r.input_shapes is not None else ''}" if shapes else ""))
        out += [line, f"Self CPU time total: {_us(total_self)}", ""]
        return "\n".join(out)


class _Recorder:
    """The per-thread hook dispatch calls (`op`) while a profile records."""

    def __init__(self, prof: "profile"):
        self.prof = prof

    def op(self, prim, args, params):
        state = _eager.trace_state
        state.profiler = None   # the op itself runs as usual, unprofiled
        shapes = ([tuple(a.shape) if hasattr(a, "shape") else [] for a in args]
                  if self.prof.record_shapes else None)
        ev = self.prof._open(prim.name, shapes)
        try:
            return _eager.bind(prim, *args, **params)
        finally:
            self.prof._close(ev)
            state.profiler = self


class profile:
    """torch.profiler.profile (see the module docstring). Activities other than CPU are
    accepted and record nothing (no GPU timeline here)."""

    def __init__(self, activities: Optional[Iterable[ProfilerActivity]] = None,
                 schedule: Optional[Callable[[int], ProfilerAction]] = None,
                 on_trace_ready: Optional[Callable[["profile"], None]] = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config=None, execution_trace_observer=None,
                 acc_events: bool = False, use_cuda: Optional[bool] = None, enabled: bool = True):
        self.activities = set(activities) if activities is not None else {ProfilerActivity.CPU}
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self.record_shapes, self.enabled = record_shapes, enabled
        self.step_num = 0
        self._roots: list = []       # finished top-level events of the current recording
        self._stack: list = []       # open ranges
        self._t0 = time.perf_counter_ns()
        self._recorder = _Recorder(self)
        self._on = False
        self._last: list = []        # the events of the last finished recording

    # ---- recording --------------------------------------------------------------------
    def _now_us(self) -> float:
        return (time.perf_counter_ns() - self._t0) / 1e3

    def _open(self, name: str, shapes=None) -> FunctionEvent:
        parent = self._stack[-1] if self._stack else None
        ev = FunctionEvent(name, self._now_us(), shapes, parent)
        (parent.children if parent is not None else self._roots).append(ev)
        self._stack.append(ev)
        return ev

    def _close(self, ev: FunctionEvent) -> None:
        ev.end_us = self._now_us()
        while self._stack:
            if self._stack.pop() is ev:
                break

    def _record(self, on: bool) -> None:
        if on == self._on:
            return
        self._on = on
        if on:
            _eager.tracer_entered()   # dispatch now looks at the thread's trace state
            _eager.trace_state.profiler = self._recorder
            _active.append(self)
        else:
            _eager.trace_state.profiler = None
            _eager.tracer_exited()
            _active.remove(self)

    def _action(self) -> ProfilerAction:
        return ProfilerAction.RECORD if self.schedule is None else self.schedule(self.step_num)

    def start(self) -> None:
        if self.enabled and ProfilerActivity.CPU in self.activities:
            self._record(self._action() != ProfilerAction.NONE)

    def stop(self) -> None:
        if self._on:
            self._record(False)
            self._finish()

    def step(self) -> None:
        """End a step: the schedule decides whether the next one records, and a cycle
        that ends here goes to ``on_trace_ready``."""
        before = self._action()
        self.step_num += 1
        after = self._action()
        if before == ProfilerAction.RECORD_AND_SAVE:
            self._record(False)
            self._finish()
        elif before == ProfilerAction.WARMUP and after != ProfilerAction.WARMUP:
            self._roots, self._stack = [], []     # warm-up steps are not kept
        if self.enabled and ProfilerActivity.CPU in self.activities:
            self._record(after != ProfilerAction.NONE)

    def _finish(self) -> None:
        self._last, self._roots, self._stack = self._roots, [], []
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- results ------------------------------------------------------------------------
    def events(self) -> EventList:
        """Every event of the last recording, in start order."""
        out: list = []

        def walk(evs):
            for e in evs:
                out.append(e)
                walk(e.children)
        walk(self._last if not self._on else self._roots)
        return EventList(sorted(out, key=lambda e: e.start_us))

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0) -> EventList:
        table: dict = {}
        for e in self.events():
            shapes = str(e.input_shapes) if group_by_input_shape else None
            avg = table.get((e.name, shapes))
            if avg is None:
                avg = table[(e.name, shapes)] = _Average(e.name, e.input_shapes if shapes else None)
            avg.count += 1
            avg.cpu_time_total += e.cpu_time_total
            avg.self_cpu_time_total += e.self_cpu_time_total
        return EventList(table.values())

    def export_chrome_trace(self, path: str) -> None:
        pid = os.getpid()
        events = [{"name": e.name, "ph": "X", "cat": "cpu_op", "ts": e.start_us, "dur": e.cpu_time_total,
                   "pid": pid, "tid": 0, "args": {} if e.input_shapes is None
                   else {"Input Dims": e.input_shapes}} for e in self.events()]
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


_active: list = []   # the profiles recording now (record_function opens ranges in them)


class record_function:
    """A named range in the recording profiles (a context manager and a decorator)."""

    def __init__(self, name: str, args: Optional[str] = None):
        self.name = name
        self._events: list = []

    def __enter__(self) -> "record_function":
        self._events = [(p, p._open(self.name)) for p in _active]
        return self

    def __exit__(self, *exc) -> None:
        for p, ev in self._events:
            p._close(ev)
        self._events = []

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)
        return wrapped


def tensorboard_trace_handler(dir_name: str, worker_name: Optional[str] = None,
                              use_gzip: bool = False) -> Callable[[profile], None]:
    """An ``on_trace_ready`` that writes each recording's chrome trace into `dir_name`."""
    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{name}.{time.time_ns() // 1_000_000}.pt.trace.json")
        prof.export_chrome_trace(path)
        if use_gzip:
            import gzip
            import shutil
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)
    return handler
