"""Smoke test of ``python -m bench``: the quick run works with whatever peers are installed.

It writes only under tmp_path (``--out``), never into the committed bench/results/.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench import report, systems, workloads

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "bench" / "results" / "latest.json"


def _snapshot(path: Path):
    return path.read_bytes() if path.exists() else None


def test_quick_run_with_installed_systems(tmp_path):
    before = _snapshot(COMMITTED)
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _snapshot(COMMITTED) == before, "the quick run must not touch the committed results"

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
    # Progress line per workload, then the table.
    assert proc.stderr.count("[numpy") >= len(workloads.WORKLOAD_NAMES)
    assert "| metric | numpy eager |" in proc.stdout
    if (tmp_path / "latest.png").exists():
        assert (tmp_path / "latest.png").stat().st_size > 1000


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
