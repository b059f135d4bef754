"""``python -m bench coldstart``: how long the programs wait for kernels with an empty cache.

    python -m bench coldstart                        # every program, eager and compiled
    python -m bench coldstart --only vae --seconds 8
    python -m bench coldstart --systems tracejit_compiled --out /tmp/cold.json

For each program (bench/programs) and system (tracejit eager, tracejit.compile), a fresh
process with a private, empty kernel cache (a new ``TRACEJIT_CACHE_DIR``) runs the
program's steps back to back for ``--seconds`` of stepping with no settle: what a user's
loop sees while every kernel compiles. It then waits for the compiles (the system's
settle) and times ``--warm-s`` more seconds of steps: the warm figure. Per program and
system:

- ``first``: the first step (s);
- ``worst/warm``: the slowest step after the first, over the warm step;
- ``to 3x``: seconds from the first step's start until every later step of the cold phase
  is within 3x the warm step (the time a cold start spends slow);
- ``cold end``: the median of the cold phase's last quarter of steps (ms);
- ``settle``: the wait for the compiles still running after the cold phase (s);
- ``warm``: the median step after the settle (ms).

With ``--disk`` a second fresh process then runs on the cache the first one filled (a
program's next start): its import of tracejit and torch (``disk import``), its first step
(``disk first``), and ``disk to 3x``: seconds from its first step's start until every later
step is within 3x its own warm step (the time it spends loading kernels).

Writes every step's time to ``--out`` (JSON; default bench/results/coldstart-latest.json).
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .harness import REPO, _run, child_env
from .programs import PROGRAMS

OUT = REPO / "bench" / "results" / "coldstart-latest.json"
SYSTEMS = ("tracejit_eager", "tracejit_compiled")
SLOW = 3.0   # a cold step over this many warm steps counts as slow


def child(system: str, program: str, seconds: float, warm_s: float, max_steps: int) -> dict:
    """Run `program` under `system` in this (fresh) process: every step's time, cold and
    after the settle, and the step at which each compiled entry's tier changed."""
    t0 = time.perf_counter()
    from .programs import torchswap
    torchswap.install()
    import torch
    import tracejit
    from tracejit.compiler.cpu.kernels import vectorized
    made: list = []

    def hook(m):
        if system == "tracejit_compiled":
            made.append(torch.compile(m))
            return made[-1]
        return m
    import_s = time.perf_counter() - t0
    module = importlib.import_module(f"bench.programs.{program}")
    prog = module.Program(hook)
    build_s = time.perf_counter() - t0 - import_s

    def tiers() -> list:
        return sorted(t for m in made for t in m.cache_stats().get("tiers", ()))

    def run(budget: float, phase: str) -> list:
        steps: list = []
        start = time.perf_counter()
        while len(steps) < max_steps and (not steps or time.perf_counter() - start < budget):
            s = time.perf_counter()
            prog.step()
            steps.append(time.perf_counter() - s)
            now = tiers()
            if now != changes[-1][2]:
                changes.append((phase, len(steps) - 1, now))
        return steps
    changes: list = [("", -1, [])]   # (phase, step, the tiers after it)
    cold = run(seconds, "cold")
    s = time.perf_counter()
    tracejit.compiler.wait()
    vectorized.settle()
    settle_s = time.perf_counter() - s
    warm = run(warm_s, "warm")
    return {"import_s": import_s, "build_s": build_s, "steps_s": cold, "settle_s": settle_s,
            "warm_steps_s": warm, "tier_changes": changes[1:]}


def summarize(cold: list, warm: list, settle_s: float) -> dict:
    """The figures of the module docstring from a process's step times."""
    warm_step = statistics.median(warm[2:] or warm)
    later = cold[1:]
    tail = later[-max(1, len(later) // 4):] if later else cold
    # the time from the first step's start until the last slow step ended
    t, until = 0.0, 0.0
    for i, s in enumerate(cold):
        t += s
        if i and s > SLOW * warm_step:
            until = t
    return {"first_s": cold[0], "second_s": cold[1] if len(cold) > 1 else None,
            "worst_over_warm": (max(later) / warm_step) if later else None,
            "to_slow_end_s": until, "cold_end_s": statistics.median(tail),
            "settle_s": settle_s, "warm_s": warm_step, "cold_steps": len(cold),
            "warm_steps": len(warm)}


def table(summary: dict) -> str:
    rows = ["| program | system | first (s) | 2nd (ms) | worst/warm | to 3x (s) | cold end (ms) "
            "| settle (s) | warm (ms) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for prog, per in summary.items():
        for system, r in per.items():
            if "error" in r:
                rows.append(f"| {prog} | {system} | {r['error']} | | | | | | |")
                continue
            second = f"{r['second_s'] * 1e3:.1f}" if r["second_s"] is not None else "-"
            worst = f"{r['worst_over_warm']:.1f}x" if r["worst_over_warm"] is not None else "-"
            rows.append(f"| {prog} | {system} | {r['first_s']:.2f} | {second} | {worst} | "
                        f"{r['to_slow_end_s']:.1f} | {r['cold_end_s'] * 1e3:.2f} | {r['settle_s']:.1f} | "
                        f"{r['warm_s'] * 1e3:.2f} |")
    disk = [(prog, system, r["disk"]) for prog, per in summary.items() for system, r in per.items()
            if "disk" in r]
    if disk:
        rows += ["", "| program | system | disk import (s) | disk first (s) | disk to 3x (s) | disk warm (ms) |",
                 "|---|---|---:|---:|---:|---:|"]
        for prog, system, d in disk:
            rows.append(f"| {prog} | {system} | {d['import_s']:.2f} | {d['first_s']:.2f} | "
                        f"{d['to_slow_end_s']:.2f} | {d['warm_s'] * 1e3:.2f} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench coldstart", description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="programs, comma-separated: " + ", ".join(PROGRAMS))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="of: " + ", ".join(SYSTEMS))
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of stepping per process")
    ap.add_argument("--warm-s", type=float, default=2.0, help="seconds of stepping after the settle")
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--disk", action="store_true",
                    help="then a second process on the cache the first filled (a warm start)")
    args = ap.parse_args(argv)
    programs = [p for p in (args.only.split(",") if args.only else PROGRAMS) if p]
    systems = [s for s in args.systems.split(",") if s]
    bad = [p for p in programs if p not in PROGRAMS] + [s for s in systems if s not in SYSTEMS]
    if bad:
        raise SystemExit(f"unknown: {', '.join(bad)}")
    summary: dict = {}
    runs: dict = {}
    for prog in programs:
        for system in systems:
            with tempfile.TemporaryDirectory(prefix="tracejit-coldstart-") as cache:
                # (nothing finishes after the exit: the process waited for its compiles)
                env = child_env({"TRACEJIT_CACHE_DIR": cache, "TRACEJIT_COMPILE_FINISH": "0",
                                 "TRACEJIT_COMPILE": os.environ.get("TRACEJIT_COMPILE", "background")})
                wargs = ["child", system, prog, "--seconds", str(args.seconds),
                         "--warm-s", str(args.warm_s), "--max-steps", str(args.max_steps)]
                res, error, tail = _run(wargs, env=env, timeout_s=args.timeout, echo=False,
                                        module="bench.coldstart")
                if args.disk and error is None and res:
                    dargs = wargs[:3] + ["--seconds", "3", "--warm-s", "1", "--max-steps", str(args.max_steps)]
                    dres, derror, _ = _run(dargs, env=env, timeout_s=args.timeout, echo=False,
                                           module="bench.coldstart")
                    if derror is None and dres:
                        res["disk"] = dres
            if error is not None or not res:
                runs.setdefault(prog, {})[system] = {"error": error or "no result", "tail": tail[-2000:]}
                summary.setdefault(prog, {})[system] = {"error": error or "no result"}
                _log(f"  [{prog:<9} {system:<17}] failed: {error}")
                continue
            runs.setdefault(prog, {})[system] = res
            s = summarize(res["steps_s"], res["warm_steps_s"], res["settle_s"])
            if "disk" in res:
                d = res["disk"]
                s["disk"] = dict(summarize(d["steps_s"], d["warm_steps_s"], d["settle_s"]), import_s=d["import_s"])
            summary.setdefault(prog, {})[system] = s
            _log(f"  [{prog:<9} {system:<17}] first {s['first_s']:.2f} s, worst "
                 f"{s['worst_over_warm'] or 0:.1f}x warm, slow until {s['to_slow_end_s']:.1f} s, "
                 f"cold end {s['cold_end_s'] * 1e3:.2f} ms, settle {s['settle_s']:.1f} s, "
                 f"warm {s['warm_s'] * 1e3:.2f} ms")
            if "disk" in s:
                d = s["disk"]
                _log(f"  [{prog:<9} {system:<17}] warm disk: import {d['import_s']:.2f} s, first "
                     f"{d['first_s']:.2f} s, slow until {d['to_slow_end_s']:.2f} s, warm {d['warm_s'] * 1e3:.2f} ms")
    data = {"meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                     "command": "python -m bench coldstart " + " ".join(sys.argv[2:] if argv is None else argv),
                     "seconds": args.seconds, "machine": f"{os.cpu_count()} CPUs"},
            "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, default=float))
    print(table(summary))
    print(f"wrote {args.out}")
    return 1 if any("error" in r for per in summary.values() for r in per.values()) else 0


def _child_main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.coldstart child")
    ap.add_argument("system", choices=SYSTEMS)
    ap.add_argument("program", choices=sorted(PROGRAMS))
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warm-s", type=float, default=2.0)
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--result", required=True)
    args = ap.parse_args(argv)
    res = child(args.system, args.program, args.seconds, args.warm_s, args.max_steps)
    Path(args.result).write_text(json.dumps(res, default=float))
    return 0


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[2:]) if sys.argv[1:2] == ["child"] else main())
