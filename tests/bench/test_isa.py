"""bench/isa.py: `--isa avx2` makes every library in a child process use AVX2 code, each
process reports what it really ran with, and the report warns where a switch did not take."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import isa, report

REPO = Path(__file__).resolve().parents[2]


def test_native_changes_nothing_and_an_unknown_set_is_named():
    assert isa.env_for("native") == {}
    with pytest.raises(ValueError, match="'avx512vnni'.*native, avx2"):
        isa.env_for("avx512vnni")


def test_avx2_switches_every_library_and_keeps_other_xla_flags():
    env = isa.env_for("avx2", base={"XLA_FLAGS": "--xla_dump_to=/tmp/x"})
    assert env["NUMBA_CPU_NAME"] == "haswell"
    assert "-avx512f" in env["NUMBA_CPU_FEATURES"].split(",")
    assert "+avx2" in env["NUMBA_CPU_FEATURES"].split(",")
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_cpu_max_isa=AVX2"
    assert isa.env_for("avx2", base={})["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2"


def _host_has_avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.skipif(not _host_has_avx2(), reason="needs a CPU that runs AVX2 code (Linux)")
def test_a_child_process_reports_the_code_it_runs():
    """What `observed` reads comes from the loaded libraries, so it tells whether the
    environment took: numba's target and numpy's OpenBLAS core."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES",
                                                            "OPENBLAS_CORETYPE")}
    env.update(isa.env_for("avx2", base=env))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    code = "import json; from bench import isa; print(json.dumps(isa.observed()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["numba_cpu"] == "haswell"
    assert seen["numba_avx512"] is False
    if isa.openblas_core() is not None:     # numpy on OpenBLAS (the wheels): its core too
        assert seen["openblas_core"] == "Haswell"


def _data(isa_name: str, systems: dict) -> dict:
    return {"meta": {"isa": isa_name, "systems": list(systems), "config": {}},
            "machine": {"cpu": "X", "cores": 2}, "systems": systems,
            "results": {}}


def test_report_names_a_process_whose_switch_did_not_take():
    good = {"numba_cpu": "haswell", "numba_avx512": False, "openblas_core": "Haswell"}
    systems = {"numpy": {"isa": good},
               "torch_eager": {"isa": {**good, "torch_capability": "AVX512"}},
               "tracejit_compiled": {"isa": {**good, "numba_avx512": True,
                                             "openblas_core": "SkylakeX"}},
               "jax_jit": {"note": "not installed"}}
    line = report.isa_line(_data("avx2", systems))
    assert "Instruction set: avx2" in line
    warn = line.split("WARNING: the switch did not take in: ")[1]
    assert "torch_eager (torch)" in warn
    assert "tracejit_compiled (numba, OpenBLAS)" in warn
    assert "numpy" not in warn and "jax_jit" not in warn


def test_report_of_a_native_run_has_no_isa_line():
    assert report.isa_line(_data("native", {"numpy": {"isa": {"openblas_core": "SkylakeX"}}})) == ""
    ok = report.isa_line(_data("avx2", {"numpy": {"isa": {"numba_avx512": False,
                                                           "openblas_core": "Haswell"}}}))
    assert "WARNING" not in ok
