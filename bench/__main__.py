"""``python -m bench``: run the workloads on every installed system, side by side.

    python -m bench                       # full run (under 15 minutes on 2 cores)
    python -m bench --quick               # reduced sizes, under a minute (smoke test)
    python -m bench --only gelu,overhead  # some workloads
    python -m bench --systems numpy,jax_jit
    python -m bench --out /tmp/b          # write /tmp/b/latest.json and latest.png
    python -m bench --isa avx2            # every system on AVX2 code (an AVX-512 host)
    python -m bench programs [--only gcn] # the public-style PyTorch programs (bench/programs)
    python -m bench coldstart [--only vae] # those programs' steps with an empty kernel cache

Each system runs in its own process; its progress lines are streamed as it goes. The
table goes to stdout, the JSON and the chart to ``--out`` (default bench/results, as
latest.json and latest.png, which git ignores: a run leaves the checkout clean). To keep a
run for the docs, copy its latest.json to a dated name there and run tools/gendocs.py.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

from . import isa as ISA
from . import report
from . import systems as S
from . import workloads as W
from .harness import run_child, run_worker

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
# torch.compile's inductor needs 10+ s per cold graph: more than --quick's minute on its
# own. --quick leaves it out unless it is named in --systems.
NOT_IN_QUICK = {"torch_compile"}
# Seconds between two systems' processes: the last one's threads (OpenMP and BLAS pools
# spin ~0.2 s after their last work) and anything it left behind (harness._leftovers, which
# stops it) are gone before the next one starts.
SYSTEM_GAP_S = 0.5


def _names(arg: str | None, known: tuple[str, ...], what: str) -> list[str]:
    if not arg:
        return list(known)
    names = [n.strip() for n in arg.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return [n for n in known if n in names]  # the canonical order, for a stable table


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes and repeats (< 1 min)")
    ap.add_argument("--only", metavar="WORKLOAD[,...]",
                    help=f"workloads to run: {', '.join(W.WORKLOAD_NAMES)}")
    ap.add_argument("--systems", metavar="SYSTEM[,...]",
                    help=f"systems to run: {', '.join(S.SYSTEM_NAMES)}")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="directory for latest.json and latest.png (default: bench/results, "
                         "untracked)")
    ap.add_argument("--no-png", action="store_true", help="do not draw the chart")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="report the median sample (default) or the best one (min), which is "
                         "the steadier estimate on a machine shared with other work")
    ap.add_argument("--isa", choices=ISA.ISAS, default="native",
                    help="instruction set every system's code uses: native (the host's) or avx2 "
                         "(Haswell-class code on an AVX-512 host; bench/isa.py)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds allowed per system process (default 400 quick, 900 full)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["programs"]:
        # unchanged PyTorch programs in four systems, a process per measurement: a runner
        # of its own (one process per system runs every workload here)
        from .programs.__main__ import main as programs
        return programs(argv[1:])
    if argv[:1] == ["coldstart"]:
        from .coldstart import main as coldstart
        return coldstart(argv[1:])
    args = parse(argv)
    wl_names = _names(args.only, W.WORKLOAD_NAMES, "workload")
    explicit = args.systems is not None
    sys_names = _names(args.systems, S.SYSTEM_NAMES, "system")
    cfg = W.config(args.quick, args.stat)
    timeout = args.timeout or (400.0 if args.quick else 900.0)
    isa_env = ISA.env_for(args.isa)
    started = time.time()

    data: dict = {
        "meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                 "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "quick": args.quick, "workloads": wl_names, "systems": sys_names,
                 "isa": args.isa,
                 "config": {k: v for k, v in vars(cfg).items() if k != "extra"}},
        "machine": None, "systems": {}, "results": {w: {} for w in wl_names},
    }
    _log(f"bench: {'quick' if args.quick else 'full'} run; workloads {', '.join(wl_names)}")
    data["meta"]["busy_before"] = _busy()
    if data["meta"]["busy_before"] > report.BUSY:
        _log(f"bench: warning: other work is using {data['meta']['busy_before']:.0%} of the CPUs; "
             "figures will be inflated")
    data["machine"] = _machine(cfg, measure="gelu" in wl_names, env=isa_env)
    if "mlp" in wl_names:
        data["machine"]["sgemm"] = _sgemm(cfg, env=isa_env)
    for i, name in enumerate(sys_names):
        note = S.availability(S.by_name(name))
        if note is None and args.quick and name in NOT_IN_QUICK and not explicit:
            note = "left out of --quick (cold compiles take minutes); name it in --systems"
        if i and not note:
            time.sleep(SYSTEM_GAP_S)
        _run_system(data, name, note, wl_names, cfg=cfg, timeout=timeout, env=isa_env)
    data["meta"]["duration_s"] = time.time() - started
    data["meta"]["busy_after"] = _busy()

    report.add_derived(data)
    print(report.render(data))
    out_json = args.out / "latest.json"
    report.write_json(data, out_json)
    wrote = [str(out_json)]
    if not args.no_png:
        why = report.write_png(data, args.out / "latest.png")
        wrote.append(why or str(args.out / "latest.png"))
    print(f"\nwrote {'; '.join(wrote)}  ({data['meta']['duration_s']:.0f} s)")
    failed = any("error" in r for per in data["results"].values() for r in per.values())
    return 1 if failed or report.checks(data) else 0


def _run_system(data: dict, name: str, note: str | None, wl_names: list[str], *, cfg: W.Config,
                timeout: float, env: dict) -> None:
    """Run one system's worker process and file its results (or the reason it did not run)."""
    info = {"label": S.by_name(name).label, "note": note}
    data["systems"][name] = info
    if note:
        _log(f"  [{name:<17}] skipped: {note}")
        return
    result, error, _tail = run_worker(name, wl_names, quick=cfg.quick, stat=cfg.stat, env_extra=env,
                                      timeout_s=timeout)
    result = result or {}
    info.update(versions=result.get("versions", {}), import_s=result.get("import_s"),
                isa=result.get("isa", {}))
    if result.get("leftover_processes"):
        info["leftover_processes"] = result["leftover_processes"]
        _log(f"  [{name:<17}] stopped {len(result['leftover_processes'])} process(es) it left running")
    for w in wl_names:
        res = result.get("workloads", {}).get(w)
        data["results"][w][name] = res if res is not None else {"error": error or "not run"}
    if error:
        info["error"] = error
        _log(f"  [{name:<17}] process failed: {error}")


def _machine(cfg: W.Config, measure: bool, env: dict) -> dict:
    from . import machine
    if not measure:
        return machine.describe()
    try:
        m = run_child("machine", "bandwidth", {"repeat": 5 if cfg.quick else 15},
                      env_extra=env, timeout_s=120)
    except RuntimeError as exc:
        return {**machine.describe(), "error": str(exc)}
    _log(f"  [{'machine':<17}] streaming copy {m['bandwidth_gbps']:.1f} GB/s "
         f"(numpy {m['numpy_copy_gbps']:.1f}, numba prange {m.get('numba_copy_gbps', 0):.1f})")
    return m


def _sgemm(cfg: W.Config, env: dict) -> dict:
    """The reference sgemm's rate in a fresh process that loads only numpy: the ceiling the
    MLP step's GEMMs are compared with (bench/breakdown.py), on the run's instruction set."""
    try:
        m = run_child("machine", "sgemm", {"repeat": 3 if cfg.quick else 15}, env_extra=env,
                      timeout_s=120)
    except RuntimeError as exc:
        return {"error": str(exc)}
    _log(f"  [{'machine':<17}] sgemm {'x'.join(map(str, m['shape']))}: {m['gflops']:.0f} GFLOP/s")
    return m


def _busy(window_s: float = 0.5) -> float:
    """Fraction of all CPUs busy over ``window_s``, measured while we run nothing: other
    work on the machine skews every figure, so the report warns about it."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    try:
        t0, i0 = sample()
        time.sleep(window_s)
        t1, i1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
