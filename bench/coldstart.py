"""``python -m bench coldstart``: how long the programs wait for kernels with an empty cache.

    python -m bench coldstart                        # every program, eager and compiled
    python -m bench coldstart --only vae --seconds 8
    python -m bench coldstart --systems tracejit_compiled --out /tmp/cold.json

For each program (bench/programs) and system (tracejit eager, tracejit.compile), two fresh
processes run the program's steps back to back for ``--seconds`` of stepping, with no
settle: what a user's loop sees. The first has a private, empty kernel cache (a new
``TRACEJIT_CACHE_DIR``): every kernel compiles while it runs. The second reuses that cache
(what the first and its exit left there): the warm figure. Per program and system:

- ``first``: the cold process's first step (s);
- ``worst/warm``: the slowest cold step after the first, over the warm step;
- ``to 3x``: seconds from the first step's start until every later cold step is within
  3x the warm step (the time a cold start spends slow);
- ``cold end``: the median of the cold process's last quarter of steps (ms);
- ``warm``: the warm process's median step after its first two (ms).

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


def child(system: str, program: str, seconds: float, max_steps: int) -> dict:
    """Run `program` under `system` in this (fresh) process: every step's time."""
    t0 = time.perf_counter()
    from .programs import torchswap
    torchswap.install()
    import torch
    hook = (lambda m: torch.compile(m)) if system == "tracejit_compiled" else (lambda m: m)
    import_s = time.perf_counter() - t0
    module = importlib.import_module(f"bench.programs.{program}")
    prog = module.Program(hook)
    build_s = time.perf_counter() - t0 - import_s
    steps: list = []
    start = time.perf_counter()
    while len(steps) < max_steps and (not steps or time.perf_counter() - start < seconds):
        s = time.perf_counter()
        prog.step()
        steps.append(time.perf_counter() - s)
    return {"import_s": import_s, "build_s": build_s, "steps_s": steps}


def summarize(cold: list, warm: list) -> dict:
    """The figures of the module docstring from two processes' step times."""
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
            "warm_s": warm_step, "cold_steps": len(cold), "warm_steps": len(warm)}


def table(summary: dict) -> str:
    rows = ["| program | system | first (s) | 2nd (ms) | worst/warm | to 3x (s) | cold end (ms) | warm (ms) |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for prog, per in summary.items():
        for system, r in per.items():
            if "error" in r:
                rows.append(f"| {prog} | {system} | {r['error']} | | | | | |")
                continue
            second = f"{r['second_s'] * 1e3:.1f}" if r["second_s"] is not None else "-"
            worst = f"{r['worst_over_warm']:.1f}x" if r["worst_over_warm"] is not None else "-"
            rows.append(f"| {prog} | {system} | {r['first_s']:.2f} | {second} | {worst} | "
                        f"{r['to_slow_end_s']:.1f} | {r['cold_end_s'] * 1e3:.2f} | {r['warm_s'] * 1e3:.2f} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench coldstart", description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="programs, comma-separated: " + ", ".join(PROGRAMS))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="of: " + ", ".join(SYSTEMS))
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of stepping per process")
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    ap.add_argument("--out", type=Path, default=OUT)
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
                env = child_env({"TRACEJIT_CACHE_DIR": cache,
                                 "TRACEJIT_COMPILE": os.environ.get("TRACEJIT_COMPILE", "background")})
                wargs = ["child", system, prog, "--seconds", str(args.seconds),
                         "--max-steps", str(args.max_steps)]
                got = {}
                for kind in ("cold", "warm"):
                    res, error, tail = _run(wargs, env=env, timeout_s=args.timeout, echo=False,
                                            module="bench.coldstart")
                    got[kind] = res if error is None and res else {"error": error or "no result",
                                                                    "tail": tail[-2000:]}
                    _finished(cache, args.timeout)
                runs.setdefault(prog, {})[system] = got
                if any("error" in r for r in got.values()):
                    err = next(r["error"] for r in got.values() if "error" in r)
                    summary.setdefault(prog, {})[system] = {"error": err}
                    _log(f"  [{prog:<9} {system:<17}] failed: {err}")
                    continue
                s = summarize(got["cold"]["steps_s"], got["warm"]["steps_s"])
                summary.setdefault(prog, {})[system] = s
                _log(f"  [{prog:<9} {system:<17}] first {s['first_s']:.2f} s, worst "
                     f"{s['worst_over_warm'] or 0:.1f}x warm, slow until {s['to_slow_end_s']:.1f} s, "
                     f"cold end {s['cold_end_s'] * 1e3:.2f} ms, warm {s['warm_s'] * 1e3:.2f} ms")
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
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--result", required=True)
    args = ap.parse_args(argv)
    res = child(args.system, args.program, args.seconds, args.max_steps)
    Path(args.result).write_text(json.dumps(res, default=float))
    return 0


def _finished(cache: str, timeout: float) -> None:
    """Wait until the workers that finish a process's compiles after its exit
    (tracejit/compiler/finish.py: a file per worker under ``<cache>/finish``) are done:
    the next process must neither share the cores with them nor find a half-filled cache."""
    where = Path(cache) / "finish"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and where.is_dir() and any(where.glob("*.json")):
        time.sleep(0.2)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[2:]) if sys.argv[1:2] == ["child"] else main())
