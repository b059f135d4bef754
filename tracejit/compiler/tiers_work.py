"""A tiered entry's background work (part of tiers.py's `TieredExecutor`): plan the
compiled program in a thread, submit its missing kernels to the compile workers, wait for
them and load them."""
from __future__ import annotations

import logging
import sys
import threading
import time

from . import forkguard, tierhints
from .cpu.runtime import coreshare

__all__ = ["BackgroundWork"]

log = logging.getLogger("tracejit.compile")

# Held while a background thread plans: `os.fork` waits for it, so a child never inherits
# a lock or import held by a thread it lacks. Rank 0: the outermost lock a fork takes.
_planning = threading.RLock()
forkguard.hold(_planning, rank=0)


class BackgroundWork:
    """TieredExecutor's background thread's part: its methods use the executor's state
    (tiers.py `TieredExecutor.__init__`)."""

    def _work(self) -> None:
        self._wait_for_go()
        try:
            if not self._planned:
                # (shorter GIL switches while this thread runs Python: coreshare.py)
                with _planning, coreshare.shorter_switches():
                    self._plan()
            if not self._failure and not self.jobs:
                with coreshare.shorter_switches():
                    self._submit()
            # numba's import (0.2-0.5 s), once the workers have their jobs; under
            # _planning so os.fork never copies a half-done import.
            if "numba" not in sys.modules:
                with _planning, coreshare.shorter_switches():
                    from . import diskcache
                    diskcache.import_numba()
            if not self._failure:
                self._wait_jobs()
            if not self._failure:
                self._load()

        except BaseException as exc:  # never leave the entry waiting on nothing
            self._bg_fail(f"{type(exc).__name__}: {exc}")
        finally:
            self._submit_done.set()
            self._ready.set()

    def _plan(self) -> None:
        from . import diskcache, workers
        ins = self._ins
        try:
            t0 = time.perf_counter()
            plans = self.program.plans_for(ins, self.grad_mode)
            variants = self._variants_of(plans)
            self._specs = [kern.spec(layouts, parallel) for kern, layouts, parallel in variants]
            self._cached = on_disk = [diskcache.is_cached(spec.source, spec.llvm_options)
                                      for spec in self._specs]
            log.info("%s: planned %d kernel variants in %.2f s (%d not on disk)", self.name,
                     len(variants), time.perf_counter() - t0, on_disk.count(False))
            if all(on_disk):
                tierhints.mark_on_disk(self._graph_key())
                if self._prestarted:  # started ahead for nothing: give their CPU back
                    workers.release_idle()
            else:
                self._warm = False   # (pruned since): calls stop waiting, tier 0 runs
                # Workers take 1-3 s to start (Python, numba, a first compile): start
                # them now (if not yet), while the jobs are submitted.
                workers.prestart()
        except Exception as exc:  # code generation refused the graph: stay on tier 0
            self._bg_fail(f"preparing its kernels failed: {type(exc).__name__}: {exc}")
            return
        self.variants = variants
        self._planned = True
        self._ins = None

    def _variants_of(self, plans: list) -> list:
        """[(kernel, layouts, parallel)]: the variants the first call of `plans` uses, each
        once; their kernels prepare a variant no plan listed in the background (`defer`)."""
        variants, seen = [], set()

        def walk(plan):
            for kern in plan.kernels:
                kern.defer = True
            for sub in plan.subplans:
                walk(sub)
        for plan in plans:
            walk(plan)
            for kern, layouts, parallel in plan.all_first_variants():
                if (id(kern), layouts, parallel) not in seen:
                    seen.add((id(kern), layouts, parallel))
                    variants.append((kern, layouts, parallel))
        return variants

    def _submit(self) -> None:
        from . import diskcache, workers
        jobs, pairs = [], []
        try:
            # Longest first (longest-processing-time-first scheduling: the last job to
            # finish is a short one), parallel variants first.
            order = sorted(range(len(self.variants)), key=lambda k: (
                not self.variants[k][2], -len(self._specs[k].source)))
            todo = [(self.variants[k], self._specs[k], self._cached[k]) for k in order]
            for (kern, layouts, parallel), spec, cached in todo:
                # (what planning found on disk stays there: only the others are asked again)
                if cached or diskcache.is_cached(spec.source, spec.llvm_options):
                    job = workers.Job(0, spec.source, kern.label, spec.llvm_options)
                    job._finish(True)  # nothing to compile: loaded below
                else:
                    job = workers.submit(spec.source, kern.label, spec.llvm_options)
                jobs.append((job, kern, layouts, parallel))
                if getattr(spec, "pair", ""):
                    pairs.append((job, kern, spec))
            # A chunk kernel's GIL-free pair (cshares.py): its module loads the kernel's, so
            # it goes after the plan's kernels, each to be taken once its kernel is in.
            from .cpu.runtime import cshares
            for job, kern, spec in pairs:
                cshares.ahead(spec.source, spec.pair, kern.label, spec.llvm_options, job)
        except Exception as exc:
            job = workers.Job(0, "", "", ())
            job._finish(False, f"submitting failed: {type(exc).__name__}: {exc}")
            jobs.append((job, None, (), False))
        self.jobs = jobs
        missing = sum(1 for j, *_ in jobs if j.id and not j.done())
        marker = tierhints.on_disk_marker(self._graph_key()) if missing else None
        if marker:   # should the program exit first, a worker finishing the jobs records it
            from . import finish
            self._mark = finish.when_cached(marker, [(j.source, j.llvm_options)
                                                     for j, *_ in jobs if j.source])
        log.info("%s: %d of %d kernel jobs compiling in workers (%d variants); running on tier 0 "
                 "meanwhile", self.name, missing, len(jobs), len(self.variants))
        self._submit_done.set()

    def _wait_jobs(self) -> None:
        from . import workers
        k = 0
        while k < len(self.jobs):
            job, kern, lay, par = self.jobs[k]
            if job.lost():  # we were forked from the process that submitted it
                self.jobs[k] = (workers.submit(job.source, job.name_hint, job.llvm_options), kern, lay, par)
                continue
            job.event.wait()  # a hung worker is killed by its dispatcher's timeout
            k += 1
            if job.ok and kern is not None and not self._failure:
                # Load it now, while the workers compile the rest (a load is a few ms of
                # the main process; the switch then waits only for the last job).
                try:
                    with coreshare.shorter_switches():
                        kern.get(lay, par)
                except Exception as exc:
                    self._bg_fail(f"loading its kernels failed: {type(exc).__name__}: {exc}")
        for job, kern, layouts, parallel in self.jobs:
            if job.ok and job.id:
                log.info("%s: kernel %s %s%s %s in a worker in %.3f s", self.name, kern.label,
                         "/".join(layouts), " parallel" if parallel else "",
                         "compiled" if job.compiled else "loaded", job.seconds)
        bad = [job for job, *_ in self.jobs if not job.ok]
        if bad:
            self._bg_fail(f"{len(bad)} of {len(self.jobs)} kernels failed: {bad[0].error}")
        else:
            tierhints.mark_on_disk(self._graph_key())
        if self._mark is not None:
            from . import finish
            finish.forget(self._mark)

    def _load(self) -> None:
        t0 = time.perf_counter()
        try:
            with coreshare.shorter_switches():
                for kern, layouts, parallel in self.variants:
                    kern.get(layouts, parallel)  # from the disk cache (verified by its manifest)
        except Exception as exc:
            self._bg_fail(f"loading its kernels failed: {type(exc).__name__}: {exc}")
            return
        log.info("%s: %d kernels loaded in %.3f s (in the background)", self.name,
                 len(self.variants), time.perf_counter() - t0)
