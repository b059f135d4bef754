"""bench/bench_models.py's switch for the general LSTM LM step: ``--embedding-rewrite off``
reaches every worker process, which compiles with tracejit's embedding-gradient rewrite off."""
from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from bench import bench_models
from tracejit.jit import scatter_products


@pytest.mark.parametrize("flag", ["on", "off"])
def test_the_switch_reaches_each_worker(monkeypatch, capsys, flag):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        system, model = cmd[cmd.index("--worker") + 1:cmd.index("--worker") + 3]
        row = {"system": system, "model": model, "ms": 40.0 if system != "torch_eager" else 50.0,
               "first_call_s": 1.0, "losses": [4.2], "during": {}}
        return types.SimpleNamespace(returncode=0, stdout=json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert bench_models.main(["--models", "lstm", "--embedding-rewrite", flag]) == 0
    assert len(calls) == len(bench_models.SYSTEMS)
    for cmd in calls:
        assert cmd[0] == sys.executable
        assert cmd[cmd.index("--embedding-rewrite") + 1] == flag
    out = capsys.readouterr().out
    assert "| lstm | tracejit_compiled | 40.0 | 0.80x |" in out
    assert ("without the embedding-gradient rewrite" in out) == (flag == "off")


def _rewrite_on() -> bool:
    from tracejit.jit import patterns
    return any(p.name == "gathered_product" for p in patterns.patterns("simplify"))


def test_set_embedding_rewrite_switches_the_pass(monkeypatch):
    monkeypatch.setenv("TRACEJIT_SCATTER_PRODUCTS", "1")
    bench_models.set_embedding_rewrite(False)
    assert not _rewrite_on()
    bench_models.set_embedding_rewrite(True)
    assert _rewrite_on()


def test_breakdown_runs_with_the_rewrite_off_and_restores_it(monkeypatch, capsys):
    from bench import model_breakdown
    seen = []
    monkeypatch.setattr(model_breakdown, "breakdown",
                        lambda name, steps, compiled, torch: seen.append(_rewrite_on()) or name)
    monkeypatch.setenv("TRACEJIT_SCATTER_PRODUCTS", "1")
    assert model_breakdown.main(["--models", "lstm", "--embedding-rewrite", "off"]) == 0
    assert seen == [False]
    assert _rewrite_on()
