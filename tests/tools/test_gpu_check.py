"""tools/gpu_check.sh: its dry run (numba's CUDA simulator, no GPU) and the pieces that
turn step exits into the report, so the prepared GPU check keeps working between GPUs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.gpu_check import report
from bench.gpu_check.opdb_cuda import DRY_RUN_OPS, compare

pytestmark = pytest.mark.long   # tests/conftest.py: started first

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
STEPS = ["install", "versions", "gpu_tests", "gelu", "launch", "train_mlp", "train_cnn",
         "train_transformer", "opdb"]


def _run(*args, tmp_path: Path):
    env = dict(os.environ, PYTHON=sys.executable, TMPDIR=str(tmp_path))
    env.pop("OUT", None)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_dry_run_runs_every_step_it_can_and_writes_its_report(tmp_path):
    out = tmp_path / "out"
    r = _run("--dry-run", "--out", str(out), tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.log"]
    rep = json.loads((out / "gpu_check.json").read_text())
    assert rep["mode"] == "dry-run" and list(rep["steps"]) == STEPS
    status = {k: v["status"] for k, v in rep["steps"].items()}
    assert status == {"install": "skipped", "versions": "passed", "gpu_tests": "skipped",
                      "gelu": "passed", "launch": "passed", "train_mlp": "skipped",
                      "train_cnn": "skipped", "train_transformer": "skipped", "opdb": "passed"}, \
        {k: (v["status"], v.get("reason")) for k, v in rep["steps"].items()}
    assert rep["summary"]["failed"] == []

    # the fused GELU kernel and the joint forward+backward graph ran as simulated kernels
    gelu = rep["steps"]["gelu"]["figures"]
    assert gelu["elements"] == 4096 and gelu["backward_groups"] >= 1
    assert gelu["kernel_fwd_max_abs_err"] < 1e-5 and gelu["joint_bwd_max_abs_err"] < 1e-4
    assert rep["steps"]["launch"]["figures"]["tracejit_launch_us"] > 0
    # the cupy tests were collected and skipped, not missed
    assert rep["steps"]["gpu_tests"]["figures"]["skipped"] >= 7
    # the op database: every dry-run op's first sample through the simulated kernels
    opdb = rep["steps"]["opdb"]
    assert opdb["figures"]["kernels"] == {"passed": len(DRY_RUN_OPS)}
    assert opdb["figures"]["ops_checked"] == len(DRY_RUN_OPS) and opdb["details"]["failures"] == []
    # training: the GPU systems skipped with a reason, tracejit eager's CPU step ran
    for model in ("mlp", "cnn", "transformer"):
        systems = rep["steps"][f"train_{model}"]["details"]["systems"]
        assert all(systems[s]["status"] == "skipped" and systems[s]["reason"]
                   for s in ("torch_eager", "tracejit_eager", "tracejit_compiled", "torch_compile"))
        smoke = systems["tracejit_eager_cpu_smoke"]
        assert smoke["status"] == "passed" and np.isfinite(smoke["first_loss"]) and smoke["step_ms"] > 0
    # no GPU target is judged on a simulator
    assert rep["targets"] and all(t["met"] is None for t in rep["targets"])
    assert {t["name"] for t in rep["targets"]} >= {"every_gpu_test_passes", "kernel_fwd_fraction_of_copy",
                                                   "tracejit_launch_us", "compiled_vs_torch_eager",
                                                   "opdb_matches_cpu"}
    log = (out / "gpu_check.log").read_text()
    assert all(f"== {s}" in log for s in STEPS) and "wrote " in log


@pytest.mark.parametrize("args, message", [(["--bogus"], "unknown option '--bogus'"),
                                           (["--only", "gelu,nope"], "no step 'nope'")])
def test_bad_options_are_named(tmp_path, args, message):
    r = _run("--dry-run", *args, tmp_path=tmp_path)
    assert r.returncode == 2 and message in r.stderr
    assert not list(tmp_path.glob("gpu_check*")), "a refused run leaves no output behind"


def _steps(tmp_path, **files):
    d = tmp_path / "steps"
    d.mkdir()
    for name, text in files.items():
        (d / name.replace("__", ".")).write_text(text if isinstance(text, str) else json.dumps(text))
    return d


def test_a_step_stopped_by_its_timeout_keeps_its_figures_and_fails(tmp_path):
    running = {"status": None, "figures": {"copy_gbs": 2900.0}, "targets": {}, "details": {}}
    d = _steps(tmp_path, gelu__json=running, gelu__rc="124 45.2 45")
    rec = report.step_result(d, "gelu")
    assert rec["status"] == "failed" and "timed out after 45 s" in rec["reason"]
    assert rec["figures"] == {"copy_gbs": 2900.0} and rec["timeout_s"] == 45


def test_a_step_that_died_or_never_ran_is_failed_and_a_budget_skip_is_skipped(tmp_path):
    d = _steps(tmp_path, launch__rc="1 3.0 25", opdb__rc="budget 0 0")
    assert report.step_result(d, "launch")["status"] == "failed"
    assert "exited with 1" in report.step_result(d, "launch")["reason"]
    assert report.step_result(d, "opdb")["status"] == "skipped"
    never = report.step_result(d, "train_cnn")
    assert never["status"] == "failed" and "never run" in never["reason"]


def test_report_lists_missed_targets_and_failures(tmp_path):
    passed = {"status": "passed", "figures": {}, "details": {},
              "targets": {"tracejit_launch_us": {"target": "<= 10 us", "value": 21.0, "met": False}}}
    failed = {"status": "failed", "reason": "x", "figures": {}, "details": {}, "targets": {}}
    _steps(tmp_path, launch__json=passed, launch__rc="0 2.0 25", gelu__json=failed, gelu__rc="0 5.0 45")
    rep = report.build(tmp_path, ["gelu", "launch"], "gpu", 0.0)
    assert rep["summary"]["failed"] == ["gelu"] and rep["summary"]["passed"] == ["launch"]
    assert rep["summary"]["targets_missed"] == ["launch.tracejit_launch_us"]


class _Op:
    random = False
    rtol = atol = 2e-5


def test_compare_finds_wrong_values_shapes_and_dtypes():
    op = _Op()
    x = np.array([1.0, np.nan, np.inf], np.float32)
    assert compare([x.copy()], [x], op, None) is None
    bad = x.copy()
    bad[0] = 1.01
    assert "1 of 3 values differ" in compare([bad], [x], op, None)
    assert "float64[3]" in compare([x.astype(np.float64)], [x], op, None)
    assert "2 outputs" in compare([x, x], [x], op, None)
    ints = np.arange(4)
    assert "1 of 4" in compare([ints + (ints == 3)], [ints], op, None)
    op.random = True   # a random op: shapes and dtypes only
    assert compare([x + 5], [x], op, None) is None
