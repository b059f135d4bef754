"""bench/programs: the PyTorch programs run unchanged by tracejit (the import swap) with
PyTorch's losses, and the runner's summary arithmetic."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.programs import PROGRAMS, SYSTEMS, report

ROOT = Path(__file__).resolve().parents[2]

# Two steps of each program, all in one fresh process (the swap must come before any torch
# import); a program that fails gives its error in place of its losses.
_RUN = """
import json, sys
if sys.argv[1] == "tracejit":
    from bench.programs import torchswap
    torchswap.install()
import importlib
import torch
out = {"__framework__": torch.__name__}
for name in sys.argv[2:]:
    torch.set_default_dtype(torch.float32)
    try:
        prog = importlib.import_module("bench.programs." + name).Program(lambda m: m)
        out[name] = [prog.step(), prog.step()]
    except Exception as e:  # noqa: BLE001  (reported per program)
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""
LOSSES: dict = {}


def _losses(framework: str, programs: list) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRACEJIT_COMPILE="sync")
    if framework == "torch":   # one thread: beside the suite's other workers, its pool waits for cores
        env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", _RUN, framework, *programs], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def unchanged_losses(request):
    """LOSSES: each framework's losses of the programs this session runs, from one process
    each (a process's start-up, torch's import above all, costs more than most programs'
    two steps)."""
    pytest.importorskip("torch")
    programs = [it.callspec.params["program"] for it in request.session.items
                if getattr(it, "originalname", "") == "test_program_runs_unchanged_with_pytorch_losses"]
    LOSSES.update(torch=_losses("torch", programs), tracejit=_losses("tracejit", programs))


@pytest.mark.usefixtures("unchanged_losses")
@pytest.mark.parametrize("program", ["gcn", "gat", "charmlp", "lstmcell", "moe", "kvgen", "caption", "sac",
                                     "tft", "dit",
                                     "textcnn", "kws", "ntm", "bbb", "sage", "conformer", "stylegan",
                                     "raft", "densenet", "hifigan",
                                     "txl", "dlrm", "yolo", "r2plus1d", "convlstm",
                                     "schnet", "rotate", "informer",
                                     "convtasnet", "ddsp", "rnnt",
                                     "nca", "tsp", "dcnv2",
                                     "din", "mod", "detr", "nsf",
                                     "performer", "autoformer",
                                     "pointnet2", "slotattn",
                                     "centernet", "dimenet",
                                     "hyena", "deepar",
                                     "esrgan", "ptrans",
                                     "whisper", "longformer",
                                     "enet", "iqn",
                                     "reformer", "deberta",
                                     "demucs", "superglue"])
def test_program_runs_unchanged_with_pytorch_losses(program):
    want, got = LOSSES["torch"][program], LOSSES["tracejit"][program]
    assert [LOSSES[f]["__framework__"] for f in LOSSES] == ["torch", "tracejit"]   # the swap took
    assert not isinstance(want, str), f"{program} fails under PyTorch: {want}"
    assert not isinstance(got, str), f"{program}: {got}"
    for a, b in zip(got, want):                              # the first step and, after one
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), (got, want)   # update, the second


def test_summary_ratios_and_geomeans():
    def res(ms, loss=1.0):
        return {"step_s": ms / 1e3, "first_loss": loss, "first_step_s": 0.1}
    runs = {"a": {"torch_eager": [res(10), res(12)], "tracejit_eager": [res(20), res(22)],
                  "torch_compile": [res(8)], "tracejit_compiled": [res(4)]},
            "b": {"torch_eager": [res(5)], "tracejit_eager": [res(5, loss=1.1)],
                  "torch_compile": [{"error": "timed out"}], "tracejit_compiled": [res(3)]}}
    s = report.summarize(runs)
    a, b = s["programs"]["a"], s["programs"]["b"]
    assert a["ms"]["torch_eager"] == pytest.approx(11.0) and a["ratios"]["eager"] == pytest.approx(21 / 11)
    assert a["ratios"]["compiled"] == pytest.approx(0.5)
    assert b["errors"] == {"torch_compile": "timed out"} and "compiled" not in b["ratios"]
    assert b["loss_ok"]["tracejit_eager"] is False and a["loss_ok"]["tracejit_eager"] is True
    g = s["geomean"]
    assert g["eager"]["value"] == pytest.approx(math.sqrt(21 / 11 * 1.0))
    assert g["eager"]["worst"] == "a" and g["compiled"]["programs"] == 1
    table = report.table(s)
    assert "| b | 5.00 | 5.00 (loss differs) | failed | 3.00 | 1.00x | - |" in table
    assert set(PROGRAMS) >= {"dcgan", "gcn", "charmlp", "seq2seq"} and len(SYSTEMS) == 4


def test_python_m_bench_hands_programs_to_their_runner(capsys):
    from bench import __main__ as bench_main
    with pytest.raises(SystemExit, match="unknown program nosuch; known: dcgan"):
        bench_main.main(["programs", "--only", "nosuch"])
    with pytest.raises(SystemExit, match="unknown system"):
        bench_main.main(["programs", "--systems", "torch_eager,jax_jit"])


@pytest.mark.parametrize("system,tiers,threads", [("tracejit_compiled", ["compiled"], 1),
                                                  ("tracejit_eager", [], 0)])
def test_worker_records_the_tiers_its_compiled_modules_ended_on(tmp_path, system, tiers, threads):
    # A compiled figure is one of compiled kernels: the result says so ("tier0" would mark
    # an entry left on the IR interpreter); an eager run compiles nothing. Each run records
    # the thread count it ran on: the one asked for, or the system's default.
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRACEJIT_COMPILE="sync")
    run = subprocess.run([sys.executable, "-m", "bench.programs.worker", system, "charmlp", "--steps", "5",
                          "--warmup", "1", "--warmup-s", "0", "--budget-s", "0.05", "--threads", str(threads),
                          "--result", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["system"] == system and res["tiers"] == tiers and res["step_s"] > 0
    assert res["threads"] == threads if threads else res["threads"] >= 1


def test_programs_refuse_a_negative_thread_count():
    from bench.programs import __main__ as programs_main
    with pytest.raises(SystemExit) as exc:   # argparse's usage error, before any run
        programs_main.main(["--threads", "-1", "--only", "charmlp"])
    assert exc.value.code == 2


_SETTLE = """
import json, pathlib, sys
import numpy as np
from bench.programs import worker
torch, hook, settle, counters = worker._framework("tracejit_compiled")
from tracejit.compiler.cpu.gemm import choice
choice.store_path = lambda: pathlib.Path(sys.argv[1])   # (a store of its own: nothing measured)
a, b = np.ones((64, 256), np.float32), np.ones((256, 512), np.float32)
key = choice.key_for(a, b, 1)
choice.forget()
first = choice.choose(key)      # not measured yet: BLAS, and the key waits
pending = key in choice._pending
settle()
print(json.dumps([first, pending, key in choice._pending, key in choice._choices]))
"""


def test_worker_settle_measures_the_gemm_choices_before_the_timing(tmp_path):
    # A choice left pending is measured by a background thread inside the timed steps (on
    # the core a second BLAS thread wants), so the worker's settle measures it first.
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRACEJIT_COMPILE="sync",
               TRACEJIT_GEMM_CHOICE="1")
    run = subprocess.run([sys.executable, "-c", _SETTLE, str(tmp_path / "choices.json")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == ["blas", True, False, True]


def test_a_system_that_cannot_run_a_program_is_unsupported_not_failed():
    def res(ms):
        return {"step_s": ms / 1e3, "first_loss": 1.0, "first_step_s": 0.1}
    runs = {"pinn": {"torch_eager": [res(10)], "tracejit_eager": [res(5)], "torch_compile": [],
                     "tracejit_compiled": [res(4)]}}
    s = report.summarize(runs)
    row = s["programs"]["pinn"]
    assert row["errors"] == {} and "torch_compile" in row["unsupported"]
    assert "compiled" not in row["ratios"] and s["geomean"]["eager"]["value"] == pytest.approx(0.5)
    assert "| pinn | 10.00 | 5.00 | unsupported | 4.00 | 0.50x | - |" in report.table(s)
