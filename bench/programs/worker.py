"""One measurement in a fresh process: ``python -m bench.programs.worker SYSTEM PROGRAM``.

Builds the program under the system's framework (tracejit: ``import torch`` answered by
tracejit, torchswap.py), runs its first step (the first loss, and the first step's time,
which includes what a compile does then), warms up for steps and seconds, lets the system
finish its background work (tracejit: kernels compiling in the workers), and times
steps one by one (``bench.harness.step_times``). Writes a JSON result to ``--result``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from . import PROGRAMS, SYSTEMS


def _framework(system: str):
    """(the ``torch`` module the program will see, compile hook, settle, counters)."""
    if system.startswith("tracejit"):
        from . import torchswap
        torchswap.install()
    import torch
    compiled = system.endswith(("_compile", "_compiled"))
    made.clear()

    def hook(m):
        if not compiled:
            return m
        made.append(torch.compile(m))
        return made[-1]
    if not system.startswith("tracejit"):
        from ..impls.torch_impl import TorchRunner
        from ..systems import by_name
        runner = TorchRunner(by_name(system))
        return torch, hook, None, runner.activity
    from ..impls.tracejit_impl import kernel_activity
    worker_cpu: dict = {}

    def settle():
        import tracejit
        from tracejit.compiler.cpu.kernels import vectorized
        from tracejit.compiler.cpu.gemm import choice
        tracejit.compiler.wait()   # compiled entries' kernels (background mode)
        vectorized.settle()        # the eager ops' kernels
        # the GEMM choices the warm-up asked for (17 keys in seq2seq's compiled step): left
        # to their background threads, they measure inside the timed steps, on the core the
        # second BLAS thread wanted, and whatever they pick lands mid-timing
        choice.settle()
    return torch, hook, settle, lambda: kernel_activity(worker_cpu)


# What the compile hook made in this process (`_tiers`).
made: list = []


def _tiers() -> list:
    """The tiers tracejit's compiled modules ended on (``cache_stats``: "compiled", or
    "tier0" where an entry stays on the IR interpreter: a figure measured at eager speed)."""
    tiers = set()
    for m in made:
        stats = getattr(m, "cache_stats", None)
        if callable(stats):
            tiers.update(stats().get("tiers", ()))
    return sorted(tiers)


def run(system: str, program: str, *, steps: int, warmup: int, warmup_s: float,
        budget_s: float, threads: int = 0) -> dict:
    """``threads``: the system's thread count (``set_num_threads``), 0 for its default."""
    from ..harness import Watch, step_times
    t0 = time.perf_counter()
    torch, hook, settle, counters = _framework(system)
    import_s = time.perf_counter() - t0
    if threads:
        torch.set_num_threads(threads)
    module = importlib.import_module(f"{__package__}.{program}")
    prog = module.Program(hook)
    t0 = time.perf_counter()
    first = prog.step()
    first_s = time.perf_counter() - t0
    # time enough steps for a steady median, within the budget (a slow step gets fewer)
    t0 = time.perf_counter()
    second = prog.step()
    est = time.perf_counter() - t0
    n = max(5, min(steps, int(budget_s / max(est, 1e-6))))
    watch = Watch(counters)
    t = step_times(prog.step, n, warmup, warmup_s, settle=settle, watch=watch)
    return {"system": system, "program": program, "import_s": import_s,
            "first_loss": first, "second_loss": second, "first_step_s": first_s,
            "step_s": t.median_s, "min_s": t.min_s, "steps": n, "warmup_steps": t.warmup,
            "during": t.during, "final_loss": prog.step(), "tiers": _tiers(),
            "threads": torch.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.programs.worker")
    ap.add_argument("system", choices=SYSTEMS)
    ap.add_argument("program", choices=sorted(PROGRAMS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--budget-s", type=float, default=3.0, help="seconds of timed steps at most")
    ap.add_argument("--threads", type=int, default=0, help="set_num_threads; 0: the default")
    ap.add_argument("--result", required=True)
    args = ap.parse_args(argv)
    res = run(args.system, args.program, steps=args.steps, warmup=args.warmup,
              warmup_s=args.warmup_s, budget_s=args.budget_s, threads=args.threads)
    Path(args.result).write_text(json.dumps(res, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
