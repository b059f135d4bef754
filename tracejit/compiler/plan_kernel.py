"""A plan's fused-group kernel: its loop nests (one per operand layouts) and compiled
variants, keyed by (layouts, parallel), compiled or loaded at their first call
(`_compile_on_first_call`), and a variant no plan listed prepared in the background
(`_Kernel.ready`: compiler/prepare.py)."""
from __future__ import annotations

import logging
import os
import threading
import warnings

from ..errors import CompileError
from . import backends
from .fusion import Group
from .kernel_errors import group_label
from .windows import channel_view

__all__ = ["_Kernel"]

log = logging.getLogger("tracejit.kernels")

_jobs_lock = threading.Lock()   # _Kernel.ready's job creation


def _new_jobs_lock() -> None:
    global _jobs_lock
    _jobs_lock = threading.Lock()   # a forked child never inherits it held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_jobs_lock)


def _compile_on_first_call(kern: "_Kernel", layouts: tuple, parallel: bool, consts: dict, name: str):
    """A stand-in for the plan global `name`: its first call compiles (or loads) `kern`'s
    variant for `layouts` and puts it in its place, so later calls go straight to it (for
    the CPU's serial twin, its entry point, skipping numba's dispatch)."""
    def first_call(*args):
        fn = kern.get(layouts, parallel)
        fn = fn if parallel else kern.backend.fast_entry(fn)
        consts[name] = fn
        return fn(*args)
    return first_call


class _Kernel:
    """A fused group with its loop nests (one per operand layouts) and compiled variants,
    keyed by (layouts, parallel)."""

    def __init__(self, group: Group, label: str, backend="cpu"):
        self.group = group
        self.label = label
        self.backend = backends.get(backend)
        self.variants: dict = {}
        self._nests: dict = {}
        self._specs: dict = {}
        # Set by a background compile: a variant no plan listed is then prepared off the
        # caller's thread (`ready`).
        self.defer = False
        self._jobs: dict = {}

    def nest(self, layouts: tuple):
        """The group's `loopnest.LoopNest` for these operand layouts (memoized)."""
        nest = self._nests.get(layouts)
        if nest is None:
            nest = self._nests[layouts] = self.backend.lower(self.group, layouts, "kernel")
        return nest

    def spec(self, layouts: tuple, parallel: bool):
        """The rendered source of a variant (memoized; rendering raises the lowering's
        user-facing errors before anything compiles)."""
        key = (layouts, self.backend.variant(parallel))
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = self.backend.render(self.nest(layouts), key[1])
        return spec

    def get(self, layouts: tuple, parallel: bool = False):
        key = (layouts, self.backend.variant(parallel))
        fn = self.variants.get(key)
        if fn is None:
            spec = self.spec(layouts, parallel)
            try:
                fn = self.backend.load(spec, self.label, key[1])
            except Exception as e:
                self._specs.pop(key, None)  # a retry renders the source again
                raise CompileError(f"compiling {group_label(self.group)} failed: {type(e).__name__}: "
                                   f"{e}\ngenerated source:\n{spec.source}") from e
            self.variants[key] = fn
            log.debug("kernel for group %d %s:\n%s", self.group.gid, layouts, spec.source)
        return fn

    def ready(self, layouts: tuple, parallel: bool = False):
        """The variant for `layouts` when it is loaded. Otherwise, for a background entry's
        kernel (`defer`), None while a thread loads or a worker compiles it (the caller runs
        a loaded variant on contiguous copies); else (sync mode) `get` compiles it here."""
        fn = self._ready(layouts, parallel)
        if fn is None or "cm" not in layouts:
            return fn
        # "cm" operands go in as their (C, N, H, W) views (windows.strided_layout)
        k = len(layouts)
        return lambda *a: fn(*[channel_view(x) if lay == "cm" else x for x, lay in zip(a, layouts)], *a[k:])

    def _ready(self, layouts: tuple, parallel: bool):
        key = (layouts, self.backend.variant(parallel))
        fn = self.variants.get(key)
        if fn is not None or not self.defer:
            return fn if fn is not None else self.get(layouts, parallel)
        job = self._jobs.get(key)
        if job is None or job.lost():
            from .prepare import prepare_variant
            with _jobs_lock:   # (two threads calling at once start one job)
                job = self._jobs.get(key)
                if job is None or job.lost():
                    job = self._jobs[key] = prepare_variant(self, layouts, parallel)
        elif job.done() and not job.ok and job.error:
            # (once: the copies keep running, with the same values)
            warnings.warn(f"tracejit: preparing kernel {self.label} {'/'.join(layouts)} failed "
                          f"({job.error}); contiguous copies of its operands keep running",
                          RuntimeWarning, stacklevel=3)
            job.error = ""
        return self.variants.get(key)
