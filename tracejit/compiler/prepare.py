"""Background preparation of kernel modules: a job done once a module is loaded in this
process, its source rendered and compiled by a compile worker (compiler/workers.py) where
the disk cache lacks it, then loaded by a thread of its own, so no caller waits for numba.
Used from above: a plan's kernel variants no plan listed (`prepare_variant`), the GIL-free
share modules (cpu/runtime/cshares.py), fused Adam's module (`module_when_ready`); and
`compile_mode`, the mode a function compiles in (its ``compile=`` option, else
$TRACEJIT_COMPILE), and whether a graph or program can compile in workers at all
(`graph_on_cpu`, `background_possible`).
"""
from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import Any, Optional

from .. import envflags
from . import cacheroot
from .cpu.runtime import gilshare

__all__ = ["MODES", "compile_mode", "graph_on_cpu", "background_possible", "prepare_variant", "module_job", "module_when_ready"]

log = logging.getLogger("tracejit.compile")  # TRACEJIT_LOG=compile
MODES = ("background", "sync")


def graph_on_cpu(graph: Any) -> bool:
    """Whether every value of `graph` lives on the CPU (then its program's target is "cpu",
    known without building the program)."""
    return all(v.aval.device.type == "cpu"
               for v in list(graph.inputs) + [o for e in graph.eqns for o in e.outs])


def background_possible(program: Any) -> bool:
    """Whether `program` (a CompiledProgram) can compile in workers: a CPU graph, and a
    disk cache for the kernels to travel through."""
    return program.target == "cpu" and cacheroot.root() is not None


def compile_mode(option: Optional[str]) -> str:
    """The mode for a function: its ``compile=`` option, else $TRACEJIT_COMPILE, else background."""
    if option is not None:
        return option
    env = envflags.value("TRACEJIT_COMPILE").lower()
    return env if env in MODES else "background"


_module_jobs: dict = {}
_module_warned: set = set()


def _prepare(name_hint: str, source_of, load, rank: Optional[int] = None,
             after=None) -> "workers.Job":
    """A job done once a kernel module is loaded in this process: a thread gets its
    (source, llvm_options) from `source_of`, checks the disk, has a worker compile it if
    it is not there, then calls `load` (numba's import and the load are not a caller's
    wait)."""
    from . import diskcache, workers
    job = workers.Job(0, "", name_hint, ())

    def run():
        t0 = time.perf_counter()
        compiled = 0
        try:
            source, llvm_options = source_of()
            if not diskcache.is_cached(source, llvm_options):
                log.info("%s: compiling in a worker; the caller runs what is loaded meanwhile",
                         name_hint)
                wjob = workers.submit(source, name_hint, llvm_options, rank=rank, after=after)
                wjob.event.wait()
                if not wjob.ok:
                    job._finish(False, wjob.error)
                    return
                compiled = 1
            with gilshare.shorter_switches():
                load()
        except Exception as exc:
            job._finish(False, f"{type(exc).__name__}: {exc}")
            return
        log.info("%s: ready after %.3f s (in the background)", name_hint, time.perf_counter() - t0)
        job._finish(True, seconds=time.perf_counter() - t0, compiled=compiled)

    threading.Thread(target=run, daemon=True, name="tracejit-module-prepare").start()
    return job


def _prepare_module(source: str, name_hint: str, llvm_options: tuple, rank: Optional[int],
                    after) -> "workers.Job":
    # Rank EAGER by default: the module's array path runs meanwhile (fused Adam's numpy
    # update), so a background compile's plan kernels, whose switch ends tier 0, go first.
    # MLP step, one worker while training: Adam's job came 0.05 s before the row kernels and
    # held the entry's switch back by its whole compile (~1 s of CPU).
    from . import diskcache, workers
    return _prepare(name_hint, lambda: (source, llvm_options), lambda: diskcache.load_module(
        source, name_hint=name_hint, llvm_options=llvm_options),
        rank=workers.EAGER if rank is None else rank, after=after)


def prepare_variant(kern, layouts: tuple, parallel: bool) -> "workers.Job":
    """For `plan._Kernel.ready`: a job done once `kern`'s variant for `layouts` is loaded
    (rendered, compiled by a worker when not on disk, and loaded by a thread). Rank STEADY,
    not FIRST: no call waits for it (the caller runs a loaded variant on contiguous copies
    meanwhile, the same values), and the compiled step runs it at every call, as it does the
    layers' own kernels queued before it. At FIRST it went ahead of the LSTM LM's whole-loop
    kernels queued a moment earlier, a copy saved against a numpy loop: LM.forward's nd
    parallel variant (0.41-0.50 s of one worker) ran before both loops (7 of 15 cold
    background runs) or between them (8), and the loops were in after 4.25-4.4 s of the
    worker's compiles, against 3.8-3.9 s at STEADY (load 1.5-2.1; every kernel in: the
    same, one worker compiling the same jobs)."""
    def source_of():
        spec = kern.spec(layouts, parallel)
        return spec.source, spec.llvm_options
    def load():
        kern.get(layouts, parallel)
        if callable(kern.defer):
            kern.defer(kern, layouts, parallel)   # recorded for the next process
    from . import workers
    return _prepare(f"{kern.label} {'/'.join(layouts)}{' parallel' if parallel else ''}",
                    source_of, load, rank=workers.STEADY)


def module_job(source: str, name_hint: str, llvm_options: tuple = (), rank: Optional[int] = None,
               after=None) -> "Optional[workers.Job]":
    """`module_when_ready`'s background job for a module, started at the first ask: done
    once the module is loaded in this process (compiled by a worker first where the disk
    lacks it). None where nothing runs in the background: sync mode, no disk cache, or
    the module already loaded (`module_when_ready` loads it on the spot then)."""
    from . import diskcache, workers
    if compile_mode(None) != "background" or diskcache.in_memory(source, llvm_options) \
            or diskcache.cache_dir() is None:
        return None
    key = (source, llvm_options)
    job = _module_jobs.get(key)
    if job is None or job.lost() or (job.done() and not job.ok and job.error == workers.SHUT_DOWN):
        # (a job the pool never ran, shut down meanwhile: a new pool takes it again)
        job = _module_jobs[key] = _prepare_module(source, name_hint, llvm_options, rank, after)
    return job


def module_when_ready(source: str, name_hint: str, llvm_options: tuple = (),
                      rank: Optional[int] = None, after=None):
    """For hand-written kernel modules that have an array fallback (fused Adam): the module
    if it is loaded, else None while a background thread loads it from disk or has a worker
    compile it first (sync mode, or no disk cache: compile it now). A failed compile gives
    None for good, with one warning. `rank` and `after` place the worker's job
    (workers.submit; rank EAGER by default)."""
    from . import diskcache
    job = module_job(source, name_hint, llvm_options, rank, after)
    if job is None:
        return diskcache.load_module(source, name_hint=name_hint, llvm_options=llvm_options)
    if not job.done():
        return None
    if not job.ok:
        key = (source, llvm_options)
        if key not in _module_warned:
            _module_warned.add(key)
            warnings.warn(f"tracejit: background compile of {name_hint} failed ({job.error}); "
                          f"the array path keeps running", RuntimeWarning, stacklevel=3)
        return None
    return diskcache.load_module(source, name_hint=name_hint, llvm_options=llvm_options)
