"""Each GEMM of a compiled model step timed inside the step and alone, on the same operands.

    python -m bench.step_gemms [--models transformer] [--threads 1|2] [--steps N] [--repeats R]
                               [--sweep-mib M]

The question it answers: does a product run slower inside a training step than alone, and
by how much? ``bench.model_breakdown`` times every call of a step; its GEMM rates compared
with a product timed on its own in another process (another day, another phase of a shared
machine) mix three things: the machine's speed at the time, the state of the caches the
step leaves to each product, and the step itself (its buffers, its thread hand-overs). Here
the three are taken apart in one process: the operands of one step's GEMM calls (compiled
plans' ``MATMUL`` and ``I_matmul_bias``; the steps are
``bench/impls/models.py``'s, run by phase as ``bench.model_breakdown`` runs them) are kept;
then, `--steps` times, a step is timed call by call and each kept call is repeated on
exactly those arrays (steps and alone calls taking turns):

- *alone, warm*: right after a call on the same operands (what a product's own benchmark
  measures);
- *alone, swept*: right after reading a `--sweep-mib` buffer (256 MiB: more than this
  machine's caches give one process), every operand and the output's memory cold.

Each row also gives the minor page faults per call in the step (an output buffer faulted
in afresh would show here) and whether the alone call's result has the step's bits (the
kept step runs without its optimizer update, so the weights it read are the ones the alone
calls read: a different result would mean the alone call ran another computation).

``--threads 1`` (default) runs BLAS and numba on one thread and times CPU time, as
``bench.model_breakdown`` does (another process on the cores does not count); ``--threads 2``
times wall time on two threads, for which the machine must be quiet (run it under the
measuring lock, with ``chrt -f 1`` where other work runs). The load policy is off
(``TRACEJIT_ADAPTIVE_THREADS=0``) so that every call runs the same way.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

__all__ = ["StepGemms", "measure", "report", "main", "main_threads"]

_GEMM_NAMES = ("MATMUL", "I_matmul_bias")


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _label(name: str, args: tuple) -> str:
    from .model_breakdown import _gemm_label
    if name == "I_matmul_bias":
        _, x, w, _ = args
        return _gemm_label(x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x, w)[5:] + " +bias"
    return _gemm_label(*args[:2])[5:]


def _results(out) -> list:
    import numpy as np
    return [np.array(o, copy=True) for o in (out if isinstance(out, tuple) else (out,))]


class StepGemms:
    """The GEMM calls of every compiled CPU plan, timed with `clock`: per label, each call's
    seconds and minor page faults; while `keep` is set, instead, each call's function,
    arguments and a copy of its result (in call order)."""

    def __init__(self, clock=time.thread_time):
        self.clock = clock
        self.seconds: dict = {}
        self.faults: dict = {}
        self.kept: list = []          # (label, fn, args, results)
        self.keep = False
        self.timing = True         # False: calls run untimed
        self._saved: list = []

    def _wrap(self, name: str, fn):
        clock = self.clock

        def call(*args):
            f0 = _faults()
            t0 = clock()
            out = fn(*args)
            dt = clock() - t0
            df = _faults() - f0
            label = _label(name, args)
            if self.keep:        # (the kept step holds more memory: its calls are not timed)
                self.kept.append((label, fn, args, _results(out)))
            elif self.timing:
                self.seconds.setdefault(label, []).append(dt)
                self.faults.setdefault(label, []).append(df)
            return out
        return call

    def __enter__(self) -> "StepGemms":
        from tracejit.compiler.plan import PRODUCT_NAME
        from .breakdown import _plans
        for plan in _plans():
            g = getattr(plan.fn, "__globals__", None)
            if g is None or getattr(plan.backend, "name", plan.backend) != "cpu":
                continue
            for name in [n for n in g if n in _GEMM_NAMES or PRODUCT_NAME.match(n)]:
                self._saved.append((g, name, g[name]))
                g[name] = self._wrap(name, g[name])
        return self

    def __exit__(self, *exc) -> None:
        for g, name, value in reversed(self._saved):
            g[name] = value
        self._saved.clear()


def _alone(fn, args, repeats: int, clock, sweep=None) -> list:
    """Seconds of `repeats` calls ``fn(*args)``, each after `sweep()` (swept) or right after
    an untimed call on the same operands (warm)."""
    out = []
    for _ in range(repeats):
        if sweep is None:
            fn(*args)
        else:
            sweep()
        t0 = clock()
        fn(*args)
        out.append(clock() - t0)
    return out


def measure(phases: dict, steps: int = 8, repeats: int = 1, sweep_bytes: int = 256 << 20,
            clock=time.thread_time, warmup: int = 2) -> list:
    """Rows for a step given as ``{phase: fn}`` (run in order, as bench.model_breakdown's
    `_phased_step` gives it): for each GEMM label, a dict with ``calls`` (per step),
    ``step`` (seconds of each of its calls in the `steps` timed steps), ``faults`` (minor
    page faults per call in those steps), ``warm`` and ``swept`` (seconds alone) and ``same``
    (every kept call, repeated alone, gave the step's bits).

    First one step is kept, without its ``optimizer`` phase (the weights stay the ones the
    alone calls read), and one more runs untimed; then `steps` rounds, each one timed step followed by every kept call
    alone, `repeats` times warm and `repeats` times swept: the step and the alone calls take
    turns, so a change in the machine's speed (a shared machine's phases move a product's
    time by 10% within minutes) falls on both alike."""
    import numpy as np
    for _ in range(warmup):
        for fn in phases.values():
            fn()
    rec = StepGemms(clock)
    sweeper = np.ones(max(1, sweep_bytes // 4), np.float32)

    def sweep():
        sweeper.sum()
    rows: dict = {}
    with rec:
        rec.keep = True
        for name, fn in phases.items():
            if name != "optimizer":
                fn()
        rec.keep = False
        for label, fn, args, want in rec.kept:
            row = rows.setdefault(label, {"label": label, "calls": 0, "step": [], "faults": [],
                                          "warm": [], "swept": [], "same": True})
            row["calls"] += 1
            got = _results(fn(*args))
            row["same"] = row["same"] and len(got) == len(want) and all(
                g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))
        # one untimed step: the first step after the kept one faulted in new heap memory
        # (the kept arrays hold ~100 MB of the Transformer's; 515 faults in one pair's call)
        rec.timing = False
        for fn in phases.values():
            fn()
        rec.timing = True
        for _ in range(steps):
            for fn in phases.values():
                fn()
            for label, fn, args, _ in rec.kept:
                rows[label]["warm"] += _alone(fn, args, repeats, clock)
            for label, fn, args, _ in rec.kept:
                rows[label]["swept"] += _alone(fn, args, repeats, clock, sweep)
    for label, row in rows.items():
        row["step"], row["faults"] = rec.seconds.get(label, []), rec.faults.get(label, [])
    return sorted(rows.values(), key=lambda r: -statistics.median(r["step"]) * r["calls"])


def _ms(xs: list) -> str:
    return f"{min(xs) * 1e3:.3f} / {statistics.median(xs) * 1e3:.3f}"


def report(rows: list, title: str) -> str:
    """A markdown table of `measure`'s rows and the per-step sums (median x calls)."""
    lines = [title, "", "| GEMM call | per step | in step min / median ms | faults per call | "
             "alone warm | alone swept | same bits |", "|---|---:|---:|---:|---:|---:|:---:|"]
    sums = [0.0, 0.0, 0.0]
    for r in rows:
        lines.append(f"| {r['label']} | {r['calls']} | {_ms(r['step'])} | {statistics.mean(r['faults']):.0f} | "
                     f"{_ms(r['warm'])} | {_ms(r['swept'])} | {'yes' if r['same'] else 'NO'} |")
        for i, key in enumerate(("step", "warm", "swept")):
            sums[i] += statistics.median(r[key]) * r["calls"]
    lines.append("")
    lines.append(f"per step (median x calls): in step {sums[0] * 1e3:.2f} ms, alone warm {sums[1] * 1e3:.2f}, "
                 f"alone swept {sums[2] * 1e3:.2f}")
    return "\n".join(lines)


def _threads(n: int) -> None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(n)
    os.environ.setdefault("TRACEJIT_ADAPTIVE_THREADS", "0")
    os.environ.setdefault("TRACEJIT_COMPILE", "sync")


def main_threads(argv: list) -> int:
    """The ``--threads`` count in `argv` (1 when absent), read before anything loads numpy."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.step_gemms", description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="transformer")
    ap.add_argument("--threads", type=int, choices=(1, 2), default=1)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1, help="alone calls per kept call, state and round")
    ap.add_argument("--sweep-mib", type=int, default=256)
    args = ap.parse_args(argv)
    import tracejit as tj
    from .model_breakdown import _phased_step
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    for m in args.models.split(","):
        phases, _ = _phased_step(tj, True, m)
        rows = measure(phases, args.steps, args.repeats, args.sweep_mib << 20, clock)
        print(report(rows, f"## {m}: GEMM calls in the step and alone, {args.threads} thread(s), "
                           f"{'CPU' if args.threads == 1 else 'wall'} time, load {os.getloadavg()[0]:.2f}"))
        print()
    return 0


if __name__ == "__main__":
    # before tracejit and numpy load: the thread counts, then tracejit's own thread tunings
    # (GOMP_SPINCOUNT, OPENBLAS_THREAD_TIMEOUT), which numpy's OpenBLAS reads when it loads
    _threads(main_threads(sys.argv[1:]))
    import tracejit  # noqa: F401
    sys.exit(main())
