"""``python -m bench.programs``: time the public-style programs in four systems.

    python -m bench.programs                       # every program, 2 rounds
    python -m bench.programs --only gcn,charmlp --rounds 3
    python -m bench.programs --systems torch_eager,tracejit_eager --out /tmp/p.json

For each program and round, each system runs in a fresh process of its own
(``worker.py``), one after the other; the order of the systems alternates between
rounds (forward, then backward), so a drift in the machine's load falls on every system
alike. Prints a Markdown table (report.py) and writes the results, every round's raw
figures with them, to ``bench/results/programs-latest.json`` (ignored by git; a run
worth keeping is copied under a dated name and named in docs/guide/benchmarks.md).
Exit status 1 when a system failed or a first loss disagrees with PyTorch eager's.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

from . import PROGRAMS, SYSTEMS, UNSUPPORTED, report
from ..harness import REPO, _run, child_env

OUT = REPO / "bench" / "results" / "programs-latest.json"


def _names(arg: str | None, known, what: str) -> list[str]:
    if arg is None:
        return list(known)
    names = [n for n in arg.split(",") if n]
    bad = [n for n in names if n not in known]
    if bad:
        raise SystemExit(f"unknown {what} {', '.join(bad)}; known: {', '.join(known)}")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.programs", description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="programs, comma-separated: " + ", ".join(PROGRAMS))
    ap.add_argument("--systems", help="systems, comma-separated: " + ", ".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per process at most")
    ap.add_argument("--budget-s", type=float, default=3.0, help="seconds of timed steps per process")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads every system may use (torch.set_num_threads in each process); "
                         "0: each system's own default. Every run records what it used")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.threads < 0:
        ap.error(f"--threads must be 0 (each system's default) or more, got {args.threads}")
    programs = _names(args.only, PROGRAMS, "program")
    systems = _names(args.systems, SYSTEMS, "system")
    env = child_env({"TRACEJIT_COMPILE": os.environ.get("TRACEJIT_COMPILE", "background")})
    started = time.time()
    runs: dict = {p: {s: [] for s in systems} for p in programs}
    for prog in programs:
        for rnd in range(args.rounds):
            for system in (systems if rnd % 2 == 0 else systems[::-1]):
                if system in UNSUPPORTED.get(prog, {}):
                    continue
                wargs = [system, prog, "--steps", str(args.steps), "--budget-s", str(args.budget_s),
                         "--warmup-s", str(args.warmup_s), "--threads", str(args.threads)]
                res, error, tail = _run(wargs, env=env, timeout_s=args.timeout, echo=False,
                                        module="bench.programs.worker")
                if error is not None or res is None:
                    res = {"error": error or "no result", "tail": tail[-2000:]}
                    _log(f"  [{prog:<9} {system:<17}] failed: {res['error']}")
                else:
                    # (an entry left on tier 0 ran the IR interpreter: not a compiled figure)
                    stuck = ", an entry stayed on tier 0" if "tier0" in res.get("tiers", ()) else ""
                    _log(f"  [{prog:<9} {system:<17}] {res['step_s'] * 1e3:9.2f} ms/step "
                         f"(first step {res['first_step_s']:.2f} s, loss {res['first_loss']:.6g}, "
                         f"{res.get('threads', '?')} threads{stuck})")
                runs[prog][system].append(res)
    summary = report.summarize(runs)
    data = {"meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                     "command": "python -m bench.programs " + " ".join(sys.argv[1:] if argv is None else argv),
                     "rounds": args.rounds, "programs": programs, "systems": systems,
                     "threads": args.threads or "each system's default",
                     "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                     "duration_s": round(time.time() - started, 1)},
            "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, default=float))
    print(report.table(summary))
    for name, g in summary["geomean"].items():
        print(f"{name}: geometric mean {g['value']:.2f}x over {g['programs']} programs; "
              f"worst {g['worst']} {g['worst_ratio']:.2f}x")
    print(f"wrote {args.out}")
    bad_loss = [(p, s) for p, r in summary["programs"].items() for s, ok in r["loss_ok"].items() if not ok]
    for p, s in bad_loss:
        print(f"first loss differs: {p} under {s}", file=sys.stderr)
    failed = any(r["errors"] for r in summary["programs"].values())
    return 1 if failed or bad_loss else 0


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
