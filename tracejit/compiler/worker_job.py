"""A compile job: one kernel module for a worker process to compile into the disk cache
(compiler/workers.py queues and dispatches them)."""
from __future__ import annotations

import os
import threading
from typing import Optional

__all__ = ["Job"]


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
