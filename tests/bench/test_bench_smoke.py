"""Smoke test of ``python -m bench``: the quick run works with whatever peers are installed.

It writes only under tmp_path (``--out``), never into the tracked bench/results/ files; a
run without ``--out`` writes latest.*, which git ignores.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench import report, systems, workloads

pytestmark = pytest.mark.long   # tests/conftest.py: started first

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def _snapshot(root: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*")) if p.is_file()}


def test_quick_run_with_installed_systems(tmp_path):
    before = _snapshot(RESULTS)
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _snapshot(RESULTS) == before, "the quick run must not touch bench/results/"

    data = json.loads((tmp_path / "latest.json").read_text())
    assert data["meta"]["quick"] is True
    assert data["meta"]["workloads"] == list(workloads.WORKLOAD_NAMES)
    assert data["machine"]["bandwidth_gbps"] > 0
    numpy = {w: data["results"][w]["numpy"] for w in workloads.WORKLOAD_NAMES}
    assert numpy["gelu"]["fwd_ms"] > 0 and numpy["gelu"]["fwd_x_bound"] > 0
    assert numpy["mlp2"]["step_us"] > 0 and numpy["mlp"]["step_ms"] > 0
    assert numpy["mlp2"]["timing"]["warmup"] >= workloads.QUICK.mlp2_warmup - 1
    assert numpy["overhead"]["call_us"] > 0
    assert numpy["compile"]["skipped"].startswith("eager")
    # Every system that ran has an entry for every workload: numbers, a skip note or an error.
    for name, info in data["systems"].items():
        if info.get("note"):
            continue
        for w in workloads.WORKLOAD_NAMES:
            assert name in data["results"][w], (name, w)
    assert report.checks(data) == []
    # tracejit's eager rows of large arrays carry the thread count they ran on
    for w in ("gelu", "opcost"):
        assert data["results"][w]["tracejit_eager"]["policy"]["adaptive"] in (True, False), w
    # Every timed run says what happened during it (harness.Watch): tracejit's counters of
    # kernel loads and compiles are there, zero or not, and others' cores per timing
    for w in ("gelu", "mlp2", "models"):
        res = data["results"][w]["tracejit_eager"]
        assert "others_cores_max" in res["during_timing"], w
        assert all(k in ("kernel_loads", "kernel_compiles", "worker_cpu_s", "others_cores_max")
                   for k in res["during_timing"]), res["during_timing"]
    assert "others_cores" in data["results"]["mlp2"]["numpy"]["timing"]["during"]
    assert data["results"]["models"]["tracejit_eager"]["cnn"]["policy"]["adaptive"] in (True, False)
    bd = data["results"]["mlp"]["tracejit_compiled"].get("breakdown") or {}
    if "error" not in bd:   # the breakdown counts kernel work inside its two timed stretches
        assert [type(n) for n in bd["kernel_work_steps"]] == [int, int]
    # Progress line per workload, then the table.
    assert proc.stderr.count("[numpy") >= len(workloads.WORKLOAD_NAMES)
    assert "| metric | numpy eager |" in proc.stdout
    if (tmp_path / "latest.png").exists():
        assert (tmp_path / "latest.png").stat().st_size > 1000


def test_the_default_output_is_ignored_by_git():
    """`python -m bench` without --out writes latest.json and latest.png under
    bench/results/: git must ignore them, so a run leaves the checkout clean."""
    import shutil
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert bench_main.DEFAULT_OUT == RESULTS
    names = ["bench/results/latest.json", "bench/results/latest.png"]
    proc = subprocess.run(["git", "check-ignore", *names], cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.split() == names
    tracked = subprocess.run(["git", "ls-files", "bench/results"], cwd=REPO, capture_output=True,
                             text=True).stdout.split()
    assert tracked and not any(n.startswith("bench/results/latest.") for n in tracked)


def test_missing_peer_is_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    real = systems.availability
    monkeypatch.setattr(systems, "availability",
                        lambda s: real(s) if s.name == "numpy" else f"{s.module} not installed (test)")
    rc = bench_main.main(["--only", "overhead", "--systems", "numpy,torch_eager,jax_jit",
                          "--out", str(tmp_path), "--no-png"])
    assert rc == 0
    data = json.loads((tmp_path / "latest.json").read_text())
    assert data["systems"]["torch_eager"]["note"] == "torch not installed (test)"
    assert data["results"]["overhead"]["numpy"]["call_us"] > 0
    assert "jax_jit" not in data["results"]["overhead"]
    out = capsys.readouterr().out
    assert "torch eager: torch not installed (test)" in out


def test_unknown_names_are_rejected():
    with pytest.raises(SystemExit):
        bench_main.main(["--only", "no_such_workload"])
    with pytest.raises(SystemExit):
        bench_main.main(["--systems", "no_such_system"])


def test_bandwidth_bound_ratio():
    data = {"machine": {"bandwidth_gbps": 40.0},
            "results": {"gelu": {"numpy": {"fwd_ms": 4.0, "fwd_bytes": 80_000_000,
                                           "fwdbwd_ms": None, "fwdbwd_bytes": 120_000_000}}}}
    report.add_derived(data)
    res = data["results"]["gelu"]["numpy"]
    assert res["fwd_bound_ms"] == pytest.approx(2.0)
    assert res["fwd_x_bound"] == pytest.approx(2.0)
    assert "fwdbwd_x_bound" not in res


def test_during_timing_lists_polluted_figures_and_leftovers():
    data = {"meta": {"workloads": ["models", "gelu"], "systems": ["tracejit_eager", "torch_eager"]},
            "systems": {"tracejit_eager": {"label": "tracejit eager",
                                           "leftover_processes": ["python -m tracejit.compiler.compile_worker"]},
                        "torch_eager": {"label": "torch eager"}},
            "results": {"models": {"tracejit_eager": {"during_timing": {"kernel_loads": 3, "kernel_compiles": 0,
                                                                       "worker_cpu_s": 1.6,
                                                                       "others_cores_max": 0.1}},
                                   "torch_eager": {"during_timing": {"others_cores_max": 0.3}}},
                        "gelu": {"tracejit_eager": {"during_timing": {"others_cores_max": 1.2}},
                                 "torch_eager": {"skipped": "x"}}}}
    # a training figure whose threads switched 1.5 times a step (a worker asleep between
    # launches, or cores lost); one that switched a few times in its 500 steps says nothing
    data["meta"]["workloads"].append("mlp2")
    data["results"]["mlp2"] = {
        "tracejit_eager": {"during_timing": {"others_cores_max": 0.04},
                           "timing": {"samples": 500, "number": 1,
                                      "during": {"others_cores": 0.04, "switches": [300, 450]}}},
        "torch_eager": {"during_timing": {"others_cores_max": 0.0},
                        "timing": {"samples": 500, "number": 1,
                                   "during": {"others_cores": 0.0, "switches": [0, 12]}}}}
    lines = report.during_timing(data)
    assert lines == [
        "- models, tracejit eager: kernel_loads 3, worker_cpu_s 1.60",
        "- gelu, tracejit eager: other processes up to 1.20 cores",
        "- mlp2, tracejit eager: its threads switched 1.5 times a step (300 voluntary, 450 involuntary)",
        "- tracejit eager left 1 process(es) running after it ended, stopped: "
        "python -m tracejit.compiler.compile_worker",
    ]
    # nothing to say: no section
    quiet = {"meta": data["meta"], "systems": {"tracejit_eager": {"label": "a"}, "torch_eager": {"label": "b"}},
             "results": {"models": {"torch_eager": {"during_timing": {"others_cores_max": 0.3}}}}}
    assert report.during_timing(quiet) == []
