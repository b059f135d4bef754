"""Tiered execution: run at once on tier 0, switch to compiled kernels when they are ready.

A cache miss captures, differentiates and plans as in sync mode, but does not wait for
numba. Its entry's executor is a `TieredExecutor`:

- **tier 0** is the IR interpreter over the ops' eager implementations (the reference
  semantics: its results equal eager, forward and backward, because gradients flow
  through the same eager autograd);
- at its first call it builds the plans that call needs (source generation only); a
  short-lived thread finds the kernel variants not yet on disk (computing cache keys
  imports numba, which the first call should not wait for) and submits them to the
  compile workers (`workers.py`); with a warm disk nothing is submitted and the switch
  comes at one of the next calls;
- between calls, once every job has finished, it loads the kernels from the disk cache
  (a few ms each) and replaces, under the function's lock, the entry's executor and
  generated hit function: later calls run compiled. Calls already running finish on the
  tier they started on; each call sees one consistent tier.

A failed job (worker crash, hang past its timeout, compile error) leaves the entry on
tier 0 with one warning. A damaged entry on disk is caught by the load's manifest check
and rebuilt in-process (diskcache warns). ``wait(fn=None, timeout=None)`` blocks until
pending compiles finish and switches the entries.

``TRACEJIT_COMPILE=background|sync`` picks the default mode (background); the
``compile=`` option of trace/script overrides it per function. Background needs the
disk cache (that is how kernels travel between processes) and a CPU graph; otherwise
the entry compiles in sync mode as before.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import warnings
import weakref
from typing import Any, Optional

from .. import envflags
from ..jit.backend import Executor, Interpreted
from ..jit.function import compiled_function_of
from . import diskcache, workers

__all__ = ["TieredExecutor", "wait", "compile_mode", "background_possible", "module_when_ready"]

log = logging.getLogger("tracejit.compile")  # TRACEJIT_LOG=compile
MODES = ("background", "sync")

_pending: "weakref.WeakSet[TieredExecutor]" = weakref.WeakSet()
_pending_lock = threading.Lock()


def compile_mode(option: Optional[str]) -> str:
    """The mode for a function: its ``compile=`` option, else $TRACEJIT_COMPILE, else background."""
    if option is not None:
        return option
    env = envflags.value("TRACEJIT_COMPILE").lower()
    return env if env in MODES else "background"


def background_possible(program: Any) -> bool:
    """Whether `program` (a CompiledProgram) can compile in workers: a CPU graph, and a
    disk cache for the kernels to travel through."""
    return program.target == "cpu" and diskcache.cache_dir() is not None


class TieredExecutor(Executor):
    """An entry's executor in background mode (see the module docstring)."""

    def __init__(self, graph, program, grad_mode: bool, lock, owner, name: str):
        self.tier0 = Interpreted(graph)
        self.program = program
        self.grad_mode = grad_mode
        self.name = name
        self.entry = None           # the Entry this executor serves (set once it exists)
        self.state = "new"          # new -> pending -> compiled | failed
        self.jobs: list = []        # [(workers.Job, kernel, layouts, parallel)]
        self.variants: list = []    # [(kernel, layouts, parallel)] the first call needs
        self.error = ""
        self._lock = lock
        self._owner = weakref.ref(owner) if owner is not None else (lambda: None)
        self._submitted_at = 0.0
        self._submit_done = threading.Event()
        self._submit_pid = os.getpid()
        self._specs: list = []

    @property
    def tier(self) -> str:
        return "compiled" if self.state == "compiled" else "tier0"

    def attach(self, entry) -> None:
        self.entry = entry

    def pending_kernels(self) -> int:
        if self.state != "pending":
            return 0
        if not self._submit_done.is_set():
            return len(self.variants)
        return sum(1 for j, *_ in self.jobs if not j.done())

    def __call__(self, ins):
        state = self.state
        if state == "pending":
            if self._all_done():
                ex = self.switch()
                if ex is not None:
                    return ex(ins)
        elif state == "compiled":
            return self.program(ins)
        elif state == "new":
            self.start(ins)
        return self.tier0(ins)

    # ---- background compile -----------------------------------------------------------
    def start(self, ins) -> None:
        """Plan for `ins` (source generation only), then, in a short-lived thread, find the
        variants not on disk and submit them; the entry switches once all are there."""
        with self._lock:
            if self.state != "new":
                return
            try:
                seen = set()
                for plan in self.program.plans_for(ins, self.grad_mode):
                    for kern, layouts, parallel in plan.all_first_variants():
                        if (id(kern), layouts, parallel) not in seen:
                            seen.add((id(kern), layouts, parallel))
                            self.variants.append((kern, layouts, parallel))
                specs = [kern.spec(layouts, parallel) for kern, layouts, parallel in self.variants]
            except Exception as exc:  # code generation refused the graph: stay on tier 0
                self._fail(f"preparing its kernels failed: {type(exc).__name__}: {exc}")
                return
            self._submitted_at = time.perf_counter()
            self.state = "pending"
            with _pending_lock:
                _pending.add(self)
            self._start_submit(specs)

    def _start_submit(self, specs) -> None:
        # The disk check computes cache keys, which imports numba (0.5-0.8 s): not in the
        # caller's first call. The thread only checks files and queues jobs.
        self._submit_pid = os.getpid()
        self._specs = specs
        self._submit_done = threading.Event()
        threading.Thread(target=self._submit, daemon=True, name="tracejit-compile-submit").start()

    def _submit(self) -> None:
        jobs = []
        try:
            for (kern, layouts, parallel), spec in zip(self.variants, self._specs):
                if diskcache.is_cached(spec.source, spec.llvm_options):
                    job = workers.Job(0, spec.source, kern.label, spec.llvm_options)
                    job._finish(True)  # nothing to compile: the switch loads it
                else:
                    job = workers.submit(spec.source, kern.label, spec.llvm_options)
                jobs.append((job, kern, layouts, parallel))
        except Exception as exc:  # never leave the entry waiting on nothing
            job = workers.Job(0, "", "", ())
            job._finish(False, f"submitting failed: {type(exc).__name__}: {exc}")
            jobs.append((job, None, (), False))
        self.jobs = jobs
        missing = sum(1 for j, *_ in jobs if j.id)
        log.info("%s: %d of %d kernels compiling in workers; running on tier 0 meanwhile",
                 self.name, missing, len(self.variants))
        self._submit_done.set()

    def _all_done(self) -> bool:
        if not self._submit_done.is_set():
            if self._submit_pid != os.getpid():  # forked while the submitting thread ran
                self._start_submit(self._specs)
            return False
        for k, (job, kern, lay, par) in enumerate(self.jobs):
            if job.lost():  # we were forked from the process that submitted it
                self.jobs[k] = (workers.submit(job.source, job.name_hint, job.llvm_options), kern, lay, par)
                return False
            if not job.done():
                return False
        return True

    def switch(self):
        """Load the compiled kernels and make the entry run them; the program, or None
        when the entry stays on tier 0."""
        with self._lock:
            if self.state == "compiled":
                return self.program
            if self.state != "pending" or not self._all_done():
                return None
            for job, kern, layouts, parallel in self.jobs:
                if job.ok and job.id:
                    log.info("%s: kernel %s %s%s %s in a worker in %.3f s", self.name, kern.label,
                             "/".join(layouts), " parallel" if parallel else "",
                             "compiled" if job.compiled else "loaded", job.seconds)
            bad = [job for job, *_ in self.jobs if not job.ok]
            if bad:
                self._fail(f"{len(bad)} of {len(self.jobs)} kernels failed: {bad[0].error}")
                return None
            return self._switch_locked()

    def _switch_locked(self):
        t0 = time.perf_counter()
        try:
            for kern, layouts, parallel in self.variants:
                kern.get(layouts, parallel)  # from the disk cache: a few ms each
        except Exception as exc:
            self._fail(f"loading its kernels failed: {type(exc).__name__}: {exc}")
            return None
        self.state = "compiled"
        entry = self.entry
        if entry is not None:
            entry.set_executor(self.program)  # callers see the old hit function or the new one
        with _pending_lock:
            _pending.discard(self)
        since = f", {time.perf_counter() - self._submitted_at:.2f} s after submitting" \
            if self._submitted_at else ""
        log.info("%s: switched to compiled kernels (%d loaded in %.3f s%s)", self.name,
                 len(self.variants), time.perf_counter() - t0, since)
        return self.program

    def _fail(self, why: str) -> None:
        self.state = "failed"
        self.error = why
        with _pending_lock:
            _pending.discard(self)
        warnings.warn(f"tracejit: background compile of {self.name} failed ({why}); it keeps "
                      f"running on tier 0 (the IR interpreter, eager speed)", RuntimeWarning, stacklevel=2)

    def owned_by(self, fn) -> bool:
        return self._owner() is fn

    def wait(self, deadline: Optional[float]) -> bool:
        """Block until our jobs are done (or `deadline`), then switch; False on timeout."""
        while self.state == "pending":
            if self._submit_pid == os.getpid():
                remaining = None if deadline is None else deadline - time.monotonic()
                if (remaining is not None and remaining <= 0) or not self._submit_done.wait(remaining):
                    return False
            elif not self._all_done() and not self._submit_done.is_set():
                continue  # resubmitted in this (forked) process
            for job, *_ in list(self.jobs):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if not job.lost() and not job.event.wait(remaining):
                    return False
            if self._all_done():
                self.switch()
        return True

    # ---- what explain, check mode and fn.compile ask of an executor ---------------------
    def precompile(self, ins, grad_mode: bool) -> None:
        self.start(ins)
        self.wait(None)

    def describe(self) -> str:
        pending = self.pending_kernels()
        return {"new": "tier 0 (not called yet)",
                "pending": f"tier 0 (the IR interpreter); {pending} of {len(self.variants)} kernels "
                           f"still compiling in workers",
                "compiled": "compiled kernels (switched from tier 0)",
                "failed": f"tier 0 for good: {self.error}"}[self.state]

    def explain_sections(self):
        return self.program.explain_sections()

    def debug_values(self, ins) -> dict:
        return self.program.debug_values(ins)


def _resolve(fn):
    """The CompiledFunction behind `fn` (a compiled module gives its forward's)."""
    cf = compiled_function_of(fn)
    if cf is not None:
        return cf
    raise TypeError(f"wait expects a function compiled by tracejit.trace/script, got {type(fn).__name__}")


def wait(fn: Any = None, timeout: Optional[float] = None) -> bool:
    """Block until the pending background compiles (of `fn`, or of every function) finish,
    and switch their entries to compiled kernels. False if `timeout` seconds passed first."""
    target = _resolve(fn) if fn is not None else None
    deadline = None if timeout is None else time.monotonic() + timeout
    with _pending_lock:
        todo = [ex for ex in _pending if target is None or ex.owned_by(target)]
    return all([ex.wait(deadline) for ex in todo])


_module_jobs: dict = {}
_module_warned: set = set()


def module_when_ready(source: str, name_hint: str, llvm_options: tuple = ()):
    """For hand-written kernel modules that have an array fallback (fused Adam): the module
    if it is loaded or ready on disk, else None while a worker compiles it (sync mode, or no
    disk cache: compile it now). A failed compile gives None for good, with one warning."""
    if compile_mode(None) != "background" or diskcache.in_memory(source, llvm_options) \
            or diskcache.cache_dir() is None:
        return diskcache.load_module(source, name_hint=name_hint, llvm_options=llvm_options)
    key = (source, llvm_options)
    job = _module_jobs.get(key)
    if job is None or job.lost():
        job = _module_jobs[key] = workers.submit(source, name_hint, llvm_options)
        log.info("%s: compiling in a worker; the array path runs meanwhile", name_hint)
    if not job.done():
        return None
    if not job.ok:
        if key not in _module_warned:
            _module_warned.add(key)
            warnings.warn(f"tracejit: background compile of {name_hint} failed ({job.error}); "
                          f"the array path keeps running", RuntimeWarning, stacklevel=3)
        return None
    log.info("%s: compiled in a worker in %.3f s; loading it", name_hint, job.seconds)
    return diskcache.load_module(source, name_hint=name_hint, llvm_options=llvm_options)
