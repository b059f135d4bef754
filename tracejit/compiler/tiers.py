"""Tiered execution: run at once on tier 0, switch to compiled kernels when they are ready
(design: docs/design/tiers.md; user guide: docs/guide/tiered-compilation.md).

A cache miss's entry gets a `TieredExecutor`. Tier 0 (`Tier0`) is the IR interpreter over
the ops' eager implementations, so its results equal eager. A background thread (from the
second call, or once the first step has ended) plans the program, submits missing kernels
to the compile workers and loads them; the next call after all are in swaps the executor
under the function's lock. A failed job leaves the entry on tier 0 with one warning.
``TRACEJIT_COMPILE=background|sync`` picks the default mode.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import warnings
import weakref
from typing import Any, Optional

from ..jit.backend import Executor
from ..jit.function import compiled_function_of
from . import tierhints
from .cpu.runtime import coreshare
from .tier0 import Tier0
# diskcache and workers are imported where used: their imports (15-30 ms) belong to the
# background thread, not the first call.

__all__ = ["TieredExecutor", "Tier0", "wait"]

log = logging.getLogger("tracejit.compile")  # TRACEJIT_LOG=compile

# The background work starts at the second call, or `_GO_AFTER_S` after the first call
# began, or, when later, `_GO_AFTER_TIER0` times its tier-0 run after it ended: about when
# the user's first step (forward, backward, update) ends.
_GO_AFTER_S = 1.0
_GO_AFTER_TIER0 = 2.0
# A warm entry (every kernel on disk from a previous run: tierhints.on_disk) runs compiled
# from its second call, which waits for the loads at most this long.
WARM_WAIT_S = 3.0
# explain waits this long for the background thread's plans (the groups it shows).
EXPLAIN_WAIT_S = 60.0
_pending: "weakref.WeakSet[TieredExecutor]" = weakref.WeakSet()
_failed: "weakref.WeakSet[TieredExecutor]" = weakref.WeakSet()   # on tier 0 for good (`wait`)
_pending_lock = threading.Lock()
from .tiers_work import BackgroundWork  # noqa: E402


class TieredExecutor(BackgroundWork, Executor):
    """An entry's executor in background mode (see the module docstring)."""

    def __init__(self, graph, program, grad_mode: bool, lock, owner, name: str, make_program=None):
        self.tier0 = Tier0(graph)
        # The CompiledProgram, or None until `program` is first read: planning costs
        # ~0.1-0.2 s, which the background thread pays rather than the first call.
        self._program = program
        self._make_program = make_program
        self._program_lock = threading.Lock()
        self.grad_mode = grad_mode
        self.name = name
        self.entries: list = []     # the Entries this executor serves (its capture's, its siblings')
        self.state = "new"          # new -> pending -> compiled | failed
        self.jobs: list = []        # [(workers.Job, kernel, layouts, parallel)]
        self.variants: list = []    # [(kernel, layouts, parallel)] the first call needs
        self.error = ""
        self._lock = lock
        self._owner = weakref.ref(owner) if owner is not None else (lambda: None)
        self._submitted_at = 0.0
        self._ins = None            # the first call's inputs (what the plans are for)
        self._planned = False       # variants known (the background thread planned them)
        self._submit_done = threading.Event()   # every variant is on disk or queued
        self._ready = threading.Event()         # ... and loaded, or the entry failed
        self._work_pid = os.getpid()
        self._failure = ""          # why the background work failed (the switch reports it)
        self._tier0_s = None        # the first call's tier-0 time (bench_tiers)
        self._hint_key = None
        self._prestarted = False    # the workers were started ahead (no on-disk record)
        # Set at the second call (or by wait/compile): until then, for at most
        # `_GO_AFTER_S`, the background thread waits so as not to slow the first step.
        self._go = threading.Event()
        self._go_at: Optional[float] = None  # time.monotonic() when the thread may start anyway
        self._warm_since: Optional[float] = None   # time.monotonic() a call began to wait
        # The graph's kernels were all on disk in an earlier run: calls wait for the loads
        # (`WARM_WAIT_S`); cleared when one is missing, the work fails or the wait ran out.
        self._warm = False
        self._warm_known = threading.Event()    # `_warm` has been decided
        self._mark = None   # finish.when_cached's token: the on-disk record, should we exit first

    @property
    def program(self):
        p = self._program
        if p is None:
            with self._program_lock:
                if self._program is None:
                    self._program = self._make_program()
                p = self._program
        return p

    @property
    def tier(self) -> str:
        return "compiled" if self.state == "compiled" else "tier0"

    def attach(self, entry) -> None:
        self.entries.append(entry)

    def kernel_counts(self) -> Optional[tuple]:
        """(in, all): the kernel modules this entry needs that are in the disk cache, and
        all it needs, each counted once; None while it plans."""
        if self.state == "new" or (self.state == "pending" and not self._submit_done.is_set()):
            return None
        uniq = list({id(j): j for j, *_ in self.jobs}.values())
        return sum(1 for j in uniq if j.done() and j.ok), len(uniq)

    def pending_kernels(self) -> int:
        """Kernel modules still compiling (or queued) in workers; 0 while planning (see
        `kernel_counts`: then the count is not known) and once none is."""
        if self.state != "pending" or not self._submit_done.is_set():
            return 0
        return sum(1 for j in {id(j): j for j, *_ in self.jobs}.values() if not j.done())

    def __call__(self, ins):
        state = self.state
        if state == "pending":
            if not self._go.is_set():   # (Event.set takes a lock: not at every call)
                self._go.set()
                self._warm_known.wait(0.1)   # (the thread decides within a few ms)
            if self._warm:
                self._await_warm()
            if self._ready_here():
                self.switch()
                state = self.state
        if state == "compiled":
            return self.program(ins)
        if state == "new":
            self.start(ins)
            t0, began = time.perf_counter(), time.monotonic()
            try:
                out = self.tier0(ins)
            finally:
                self._tier0_s = time.perf_counter() - t0
                self._go_at = max(began + _GO_AFTER_S,
                                  time.monotonic() + _GO_AFTER_TIER0 * self._tier0_s)
            return out
        return self.tier0(ins)

    def _await_warm(self) -> None:
        """In a call of a warm entry: wait until its kernels are loaded,
        at most `WARM_WAIT_S` in all; past that, calls run tier 0 until they are in."""
        t0 = time.monotonic()
        if self._warm_since is None:
            self._warm_since = t0
        deadline = self._warm_since + WARM_WAIT_S
        while self._warm and not self._ready.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                self._warm = False
                log.info("%s: its kernels are on disk but not loaded %.1f s after the first call; "
                         "tier 0 until they are", self.name, WARM_WAIT_S)
                return
            self._ready.wait(min(left, 0.01))
        if self._warm:
            log.info("%s: waited %.3f s for its kernels to load (all on disk)", self.name,
                     time.monotonic() - t0)

    # ---- background compile -----------------------------------------------------------
    def start(self, ins) -> None:
        """Hand everything but tier 0 to a background thread: plan for `ins`, submit the
        variants not on disk to the workers, wait for them and load them; the entry switches
        at the first call after that."""
        with self._lock:
            if self.state != "new":
                return
            self._ins = ins
            self._submitted_at = time.perf_counter()
            self.state = "pending"
            with _pending_lock:
                _pending.add(self)
            self._start_work()

    def _start_work(self) -> None:
        self._work_pid = os.getpid()
        self._submit_done = threading.Event()
        self._ready = threading.Event()
        threading.Thread(target=self._work, daemon=True, name="tracejit-compile-submit").start()

    def _ready_here(self) -> bool:
        """Whether the background work is done; in a forked child whose copy of the work
        thread is gone, starts it again (lost jobs are resubmitted there)."""
        if self._ready.is_set():
            return True
        if self._work_pid != os.getpid():
            with self._lock:
                if self._work_pid != os.getpid() and self.state == "pending":
                    self._start_work()
        return False

    def _wait_for_go(self) -> None:
        """Wait until the second call (or wait/compile) or about the end of the user's first
        step, never during the first call, so the planning does not share the step's GIL.
        Then decide whether the graph is warm (`_warm`), which the second call waits for."""
        while not self._go.is_set():
            at = self._go_at
            if at is None:           # the first call is still on tier 0 (or was never made)
                self._go.wait(0.05)
                continue
            left = at - time.monotonic()
            if left <= 0:
                break
            self._go.wait(left)
        # (shorter GIL switches: the graph's key and the workers' start are Python beside
        # the user's second step, which waits for the first up to 0.1 s)
        with coreshare.shorter_switches():
            try:
                self._warm = tierhints.on_disk(self._graph_key())
            except Exception:  # a hint is only advice
                self._warm = False
            self._warm_known.set()
            if not self._warm and not self._planned:
                # Probably a cold compile: the workers start (1-3 s) while we plan
                # (`release_idle` stops them if all is on disk after all).
                from . import workers
                workers.prestart()
                self._prestarted = True

    def _graph_key(self) -> Optional[str]:
        if self._hint_key is None:
            try:
                self._hint_key = tierhints.key(self.tier0.graph, self.grad_mode)
            except Exception:  # a hint is only advice
                return None
        return self._hint_key

    def switch(self):
        """Make the entry run its compiled kernels (loaded by the background thread); the
        program, or None when the entry stays on tier 0."""
        with self._lock:
            if self.state == "compiled":
                return self.program
            if self.state != "pending" or not self._ready.is_set():
                return None
            if self._failure:  # reported here, in a caller's thread: one warning
                self._fail(self._failure)
                return None
            self.state = "compiled"
            for entry in self.entries:
                entry.set_executor(self.program)  # callers see the old hit function or the new one
            with _pending_lock:
                _pending.discard(self)
            since = f" {time.perf_counter() - self._submitted_at:.2f} s after the first call" \
                if self._submitted_at else ""
            log.info("%s: switched to compiled kernels (%d variants)%s", self.name,
                     len(self.variants), since)
            return self.program

    def _bg_fail(self, why: str) -> None:
        self._warm = False
        if not self._failure:
            self._failure = why

    def _fail(self, why: str) -> None:
        self.state = "failed"
        self.error = why
        with _pending_lock:
            _pending.discard(self)
            _failed.add(self)
        warnings.warn(f"tracejit: background compile of {self.name} failed ({why}); it keeps "
                      f"running on tier 0 (the IR interpreter, eager speed)", RuntimeWarning, stacklevel=2)

    def owned_by(self, fn) -> bool:
        return self._owner() is fn

    def wait(self, deadline: Optional[float]) -> bool:
        """Block until the background work is done (or `deadline`), then switch; False on
        timeout."""
        from . import workers
        self._go.set()
        with workers.waiting():   # held jobs (worker_choice.py) are what we wait for: no longer held
            while self.state == "pending":
                if not self._ready_here():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._ready.wait(1.0 if remaining is None else min(remaining, 1.0))
                    continue
                self.switch()   # (a failure warns here, once)
        return self.state != "failed"

    # ---- what explain, check mode and fn.compile ask of an executor ---------------------
    def precompile(self, ins, grad_mode: bool) -> None:
        self._go.set()
        self.start(ins)
        self.wait(None)

    def describe(self) -> str:
        counts = self.kernel_counts()
        if self.state == "new":
            return "tier 0 (not called yet)"
        if self.state == "failed":
            return f"tier 0 for good: {self.error}"
        if counts is None:
            return ("tier 0 (the IR interpreter); loading its kernels from the disk cache"
                    if self._warm else
                    "tier 0 (the IR interpreter); planning its kernels (how many is not known yet)")
        done, total = counts
        pending = self.pending_kernels()
        tally = f"{done} of {total} kernels in"
        if self.state == "compiled":
            return f"compiled kernels (switched from tier 0); {tally}"
        if pending:
            return f"tier 0 (the IR interpreter); {tally}, {pending} still compiling in workers"
        return f"tier 0 (the IR interpreter); {tally}, loading them"

    def explain_sections(self):
        """The program's sections once the background thread has planned (waits at most
        `EXPLAIN_WAIT_S`)."""
        if self.state == "pending" and not self._submit_done.is_set():
            self._go.set()
            self._submit_done.wait(EXPLAIN_WAIT_S)
        return self.program.explain_sections()

    def debug_values(self, ins) -> dict:
        return self.program.debug_values(ins)


def forget_failures(fn) -> None:
    """Drop `fn`'s entries that stayed on tier 0 from what `wait` reports (`fn.reset()`)."""
    with _pending_lock:
        for ex in [ex for ex in _failed if ex.owned_by(fn)]:
            _failed.discard(ex)


def wait(fn: Any = None, timeout: Optional[float] = None) -> bool:
    """Block until the pending background compiles (of `fn`, or of every function) finish,
    and switch their entries to compiled kernels. False if `timeout` passed first, or an
    entry stays on tier 0 for good (a kernel failed; a RuntimeWarning said which)."""
    # (a compiled module: its forward's CompiledFunction)
    target = compiled_function_of(fn) if fn is not None else None
    if fn is not None and target is None:
        raise TypeError(f"wait expects a function compiled by tracejit.trace/script, got {type(fn).__name__}")
    deadline = None if timeout is None else time.monotonic() + timeout
    with _pending_lock:
        todo = [ex for ex in _pending if target is None or ex.owned_by(target)]
    done = all([ex.wait(deadline) for ex in todo])
    with _pending_lock:   # (entries that failed before this wait count too)
        failed = [ex for ex in _failed if ex in todo or (ex.owned_by(target) if target is not None
                                                         else ex._owner() is not None)]
    return done and not failed

