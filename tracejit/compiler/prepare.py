"""Background preparation of kernel modules: a job done once a module is loaded here, its
source compiled by a worker where the disk cache lacks it and loaded by a thread of its
own, so no caller waits for numba. Also `compile_mode` (a function's ``compile=`` option,
else $TRACEJIT_COMPILE) and whether a graph can compile in workers at all.
"""
from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import Any, Optional

from .. import envflags
from . import cacheroot
from .cpu.runtime import coreshare

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
    env = envflags.value("TRACEJIT_COMPILE").strip().lower()
    return env if env in MODES else "background"


_module_jobs: dict = {}
_module_warned: set = set()


def _prepare(name_hint: str, source_of, load, rank: Optional[int] = None,
             after=None) -> "workers.Job":
    """A job done once a kernel module is loaded: a thread gets its (source, llvm_options)
    from `source_of`, has a worker compile it if not on disk, then calls `load`."""
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
            with coreshare.shorter_switches():
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
    # Rank EAGER by default: the module's array path runs meanwhile, so a background
    # compile's plan kernels, whose switch ends tier 0, go first.
    from . import diskcache, workers
    return _prepare(name_hint, lambda: (source, llvm_options), lambda: diskcache.load_module(
        source, name_hint=name_hint, llvm_options=llvm_options),
        rank=workers.EAGER if rank is None else rank, after=after)


def prepare_variant(kern, layouts: tuple, parallel: bool) -> "workers.Job":
    """For `plan._Kernel.ready`: a job done once `kern`'s variant for `layouts` is loaded.
    Rank STEADY, not FIRST: no call waits for it (a loaded variant runs on copies
    meanwhile), and at FIRST it went ahead of the layers' own kernels (LSTM LM: loops in
    after 4.25-4.4 s of worker compiles against 3.8-3.9 s)."""
    def source_of():
        spec = kern.spec(layouts, parallel)
        return spec.source, spec.llvm_options
    from . import workers
    return _prepare(f"{kern.label} {'/'.join(layouts)}{' parallel' if parallel else ''}",
                    source_of, lambda: kern.get(layouts, parallel), rank=workers.STEADY)


def module_job(source: str, name_hint: str, llvm_options: tuple = (), rank: Optional[int] = None,
               after=None) -> "Optional[workers.Job]":
    """`module_when_ready`'s background job for a module, started at the first ask; None
    where nothing runs in the background (sync mode, no disk cache, already loaded)."""
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
    """For hand-written kernel modules with an array fallback (fused Adam): the module if
    loaded, else None while a thread loads or a worker compiles it (sync mode or no disk
    cache: compile now). A failed compile gives None for good, with one warning."""
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
