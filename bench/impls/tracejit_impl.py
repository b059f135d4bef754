"""tracejit eager and compiled (``tj.script``), through the same PyTorch-style code as torch.

The JIT and ``tj.nn``/``tj.optim`` are being written alongside this benchmark: a
workload that needs a missing piece is skipped with a note instead of failing, so the
benchmark runs at every stage of the project.
"""
from __future__ import annotations

import importlib
import os

import numpy as np

# The steady-state workloads time compiled steps after a few warm-up steps, and the compile
# workload times the first call's compilation: both mean sync mode (background mode's tier 0
# and switch are measured by bench/bench_tiers.py).
_COMPILE_MODE_SET = "TRACEJIT_COMPILE" in os.environ
os.environ.setdefault("TRACEJIT_COMPILE", "sync")

import tracejit as tj  # noqa: E402

from . import models, torchlike
from ..harness import Skip, process_cpu_s
from .base import Runner

_NEEDS_NN = {"mlp", "models", "amp"}


class TracejitRunner(Runner):
    def __init__(self, system):
        super().__init__(system)
        if not self.compiled and not _COMPILE_MODE_SET:
            # Eager: large elementwise ops run kernels compiled in the compile workers
            # (compiler/cpu/kernels/vectorized.py), as for a user; sync mode would leave them to numpy
            # unless an earlier process put them on disk. `settle` waits for them.
            os.environ["TRACEJIT_COMPILE"] = "background"
        self._worker_cpu: dict = {}   # compile worker pid -> its CPU seconds at the last reading

    def settle(self):
        from tracejit.compiler.cpu.kernels import vectorized
        if self.compiled:
            tj.compiler.wait()   # a background compile (TRACEJIT_COMPILE=background set by hand)
        # eager kernels (and the hand-written ones, compiler/cpu/kernels/loader.py) an op asked for: in sync
        # mode there is nothing to wait for, they load in the call
        vectorized.settle()
        # the GEMM choices the warm-up asked for, measured now rather than beside the timing
        from tracejit.compiler.cpu.gemm import choice
        choice.settle()

    def activity(self):
        return kernel_activity(self._worker_cpu)

    def thread_policy(self):
        from tracejit.compiler.cpu.runtime import coreshare
        if not coreshare.ENABLED:
            return {"policy": {"adaptive": False}}
        share = coreshare.core_share
        return {"policy": {"adaptive": True, "threads": share.threads(),
                           "others_cores": round(share.others, 2)}}

    def versions(self) -> dict:
        import numba
        return {"tracejit": tj.__version__, "numba": numba.__version__,
                "numba_threads": numba.get_num_threads()}

    def check_available(self, what):
        if self.compiled and not hasattr(tj, "script"):
            raise Skip("tracejit JIT not available yet")
        if what in _NEEDS_NN:
            missing = [m for m in ("nn", "optim") if not _importable(f"tracejit.{m}")]
            if missing:
                raise Skip(f"tj.{' / tj.'.join(missing)} not available yet")

    def asarray(self, a, requires_grad=False):
        return tj.tensor(np.array(a), requires_grad=requires_grad)

    def tonumpy(self, t):
        return t.detach().numpy()

    def gelu_fn(self):
        return torchlike.gelu_chain(tj)

    def overhead_fn(self):
        return torchlike.overhead_fn(tj)

    def compile(self, fn):
        return tj.script(fn) if self.compiled else fn

    def compile_count(self, compiled_fn) -> int:
        stats = getattr(compiled_fn, "cache_stats", None)
        return int(stats()["compiles"]) if stats is not None else 0

    def cache_env(self, cache_dir):
        return {"TRACEJIT_CACHE_DIR": cache_dir}

    def mlp2_step(self, data, other=None):
        return torchlike.mlp2_step(tj, self.compile, data, self.asarray, other)

    def run_mlp(self, cfg):
        res = super().run_mlp(cfg)
        if self.compiled and "step_ms" in res:
            # Where the compiled step's time goes (GEMM, fused kernels, Python), measured
            # after the step's own timing so it cannot disturb it (bench/breakdown.py).
            from .. import breakdown
            try:
                res["breakdown"] = breakdown.mlp_breakdown(
                    steps=cfg.mlp_steps, warmup=cfg.mlp_warmup, compiled=True,
                    sgemm_repeat=3 if cfg.quick else 15)
            except Exception as exc:  # the breakdown must not fail the workload
                res["breakdown"] = {"error": f"{type(exc).__name__}: {exc}"}
        return res

    def mlp_step(self, data, autocast=None):
        return torchlike.mlp_step(tj, self.compile, data, self.asarray,
                                  lambda a: tj.tensor(np.array(a)), autocast)


    def model_step(self, name, autocast=None):
        return models.model_step(tj, self.compile, name, autocast)

    def autocast(self):
        """CPU autocast to bfloat16: the context factory the amp workload's steps run under."""
        return lambda: tj.autocast("cpu", dtype=tj.bfloat16)

    def compile_probes_extra(self) -> tuple:
        # "mlp_tiers": the MLP step in background mode (tier 0 at once, kernels compiled by
        # workers): first call, time to full speed, and the first call from a warm disk.
        return ("mlp", "mlp_tiers")

    def probe_env(self, what):
        return {"TRACEJIT_COMPILE": "background"} if what == "mlp_tiers" else {}

    def probe_compile(self, params):
        if params.get("what") == "mlp_tiers":
            from .. import bench_tiers   # the same probe bench/bench_tiers.py runs
            return bench_tiers.probe("background_cold")
        return super().probe_compile(params)


def kernel_activity(worker_cpu: dict) -> dict:
    """tracejit's counters for `bench.harness.Watch`: kernel modules loaded from disk or
    compiled in this process (compiler/diskcache.py; a load from memory costs nothing and is
    not counted) and the compile workers' CPU seconds (other processes compiling for this
    one; `worker_cpu` keeps each worker's last reading, so one that exited still counts)."""
    import sys
    # (a module another thread is importing right now has no functions yet: nothing to read)
    dc = sys.modules.get("tracejit.compiler.diskcache")
    stats = dc.stats() if getattr(dc, "stats", None) is not None else {}
    out = {"kernel_loads": stats.get("disk_hits", 0), "kernel_compiles": stats.get("compiles", 0)}
    workers = sys.modules.get("tracejit.compiler.workers")
    if getattr(workers, "worker_pids", None) is not None:
        for pid in workers.worker_pids():
            cpu = process_cpu_s(pid)
            if cpu is not None:
                worker_cpu[pid] = cpu
        out["worker_cpu_s"] = sum(worker_cpu.values())
    return out


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def make(system):
    return TracejitRunner(system)
