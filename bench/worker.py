"""The child-process side: ``python -m bench.worker`` runs one system's workloads, or one
probe, and writes its JSON result to ``--result``.

    python -m bench.worker run SYSTEM --workloads gelu,mlp2 [--quick] [--stat min] --result FILE
    python -m bench.worker probe SYSTEM compile|dynamic --params JSON --result FILE
    python -m bench.worker probe machine bandwidth --params '{}' --result FILE

``run`` rewrites the result file after every workload, so a system that times out or
crashes part-way still reports what it finished. Progress lines go to stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from . import isa, systems, workloads
from .harness import Skip, progress
from .report import summarize


def _write(path: str, data: dict) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    tmp.replace(path)


def run(system_name: str, names: list[str], quick: bool, stat: str, result_path: str) -> None:
    cfg = workloads.config(quick, stat)
    system = systems.by_name(system_name)
    t0 = time.perf_counter()
    runner = systems.load(system)
    out = {"system": system_name, "import_s": time.perf_counter() - t0,
           "versions": runner.versions(), "isa": isa.observed(), "workloads": {}}
    _write(result_path, out)
    for name in names:
        t0 = time.perf_counter()
        try:
            res = getattr(runner, f"run_{name}")(cfg)
        except Skip as exc:
            res = {"skipped": str(exc)}
        except NotImplementedError as exc:  # a feature still being written: a note, not a failure
            res = {"skipped": f"not supported yet: {exc}"}
        except Exception as exc:
            traceback.print_exc()
            res = {"error": f"{type(exc).__name__}: {exc}"}
        res["elapsed_s"] = time.perf_counter() - t0
        watch = getattr(runner, "watch", None)
        if watch is not None:
            # compiles, loads and others' CPU seen during this workload's timed runs
            # (bench.harness.Watch): a figure that includes a compile says so
            res["during_timing"] = watch.take()
        out["workloads"][name] = res
        _write(result_path, out)
        progress(f"  [{system_name:<17}] {name:<9} {summarize(workloads.by_name(name), res)}"
                 f"  ({res['elapsed_s']:.1f} s)")


def probe(system_name: str, name: str, params: dict, result_path: str) -> None:
    if system_name == "machine":
        from . import machine
        if name == "sgemm":
            _write(result_path, {**machine.sgemm(**params), "isa": isa.observed()})
            return
        _write(result_path, {**machine.describe(), **machine.bandwidth(**params)})
        return
    t0 = time.perf_counter()
    runner = systems.load(systems.by_name(system_name))
    import_s = time.perf_counter() - t0
    res = getattr(runner, f"probe_{name}")(params)
    res["import_s"] = import_s
    _write(result_path, res)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.worker")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("system")
    r.add_argument("--workloads", required=True)
    r.add_argument("--quick", action="store_true")
    r.add_argument("--stat", choices=("median", "min"), default="median")
    r.add_argument("--result", required=True)
    p = sub.add_parser("probe")
    p.add_argument("system")
    p.add_argument("name")
    p.add_argument("--params", default="{}")
    p.add_argument("--result", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args.system, args.workloads.split(","), args.quick, args.stat, args.result)
    else:
        probe(args.system, args.name, json.loads(args.params), args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
