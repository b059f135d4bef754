"""Command line of the GPU check (called by ``tools/gpu_check.sh``, one step per process).

    python -m bench.gpu_check run STEP --work DIR --budget S [--full]
    python -m bench.gpu_check report --work DIR --out DIR --steps a,b,... --mode M --started T
    python -m bench.gpu_check opdb-shard ...      (a shard process of the opdb step)
    python -m bench.gpu_check train-system ...    (one system's training step)

A dry run is told by ``NUMBA_ENABLE_CUDASIM=1`` in the environment (the shell sets it).
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

STEPS = ("versions", "gpu_tests", "gelu", "launch", "train_mlp", "train_cnn",
         "train_transformer", "opdb")


def _run_step(name: str, work: Path, budget: float, full: bool) -> int:
    from .record import Record
    steps_dir = work / "steps"
    steps_dir.mkdir(parents=True, exist_ok=True)
    rec = Record(name, steps_dir / f"{name}.json", budget)
    try:
        if name == "versions":
            from .machine import versions
            versions(rec)
        elif name == "gpu_tests":
            from .machine import gpu_tests
            gpu_tests(rec)
        elif name in ("gelu", "launch"):
            from . import kernels
            getattr(kernels, name)(rec)
        elif name.startswith("train_"):
            from .training import train
            train(rec, work, name[len("train_"):])
        elif name == "opdb":
            from .opdb_cuda import opdb
            opdb(rec, work, full)
        else:
            raise ValueError(f"unknown step {name!r}; steps: {', '.join(STEPS)}")
    except Exception as e:  # noqa: BLE001 - the record is the result; the next step runs
        traceback.print_exc()
        rec.finish("failed", f"{type(e).__name__}: {e}"[:500])
    if rec.data["status"] is None:
        rec.finish("failed", "the step ended without a status")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("step", choices=STEPS)
    r.add_argument("--work", type=Path, required=True)
    r.add_argument("--budget", type=float, required=True)
    r.add_argument("--full", action="store_true", help="dry run: every op of the database")
    rep = sub.add_parser("report")
    rep.add_argument("--work", type=Path, required=True)
    rep.add_argument("--out", type=Path, required=True)
    rep.add_argument("--steps", required=True)
    rep.add_argument("--mode", required=True)
    rep.add_argument("--started", type=float, required=True)
    sh = sub.add_parser("opdb-shard")
    sh.add_argument("--index", type=int, required=True)
    sh.add_argument("--shards", type=int, required=True)
    sh.add_argument("--passes", type=int, required=True)
    sh.add_argument("--deadline", type=float, required=True)
    sh.add_argument("--file", type=Path, required=True)
    sh.add_argument("--ops", required=True)
    ts = sub.add_parser("train-system")
    ts.add_argument("--model", required=True)
    ts.add_argument("--system", required=True)
    ts.add_argument("--device", required=True)
    ts.add_argument("--budget", type=float, required=True)
    ts.add_argument("--steps", type=int, required=True)
    ts.add_argument("--file", type=Path, required=True)
    a = p.parse_args(argv)

    if a.cmd == "run":
        return _run_step(a.step, a.work, a.budget, a.full)
    if a.cmd == "report":
        from .report import build, print_summary
        report = build(a.work, a.steps.split(","), a.mode, a.started)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        print_summary(report)
        print(f"wrote {a.out / 'gpu_check.json'}")
        return 1 if report["summary"]["failed"] else 0
    if a.cmd == "opdb-shard":
        from .opdb_cuda import run_shard
        run_shard(a.ops.split(","), a.index, a.shards, a.passes, a.deadline, a.file)
        return 0
    from .training import run_system
    run_system(a.model, a.system, a.device, a.budget, a.file, a.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
