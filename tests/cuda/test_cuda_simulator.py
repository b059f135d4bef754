"""Runs the generated CUDA kernels under numba's CUDA simulator, in a process of its own.

numba decides between the real CUDA target and the simulator when ``numba.cuda`` is
first imported, from ``NUMBA_ENABLE_CUDASIM``; setting it inside this process could
flip other tests' numba, so ``sim_kernels.py`` runs in a child pytest with the variable
set, and its failures are reported here. Needs no GPU and no cupy.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long   # tests/conftest.py: started first

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def test_generated_cuda_kernels_match_cpu_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           str(HERE / "sim_kernels.py")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    report = (r.stdout[-8000:] + "\n" + r.stderr[-4000:]).strip()
    assert r.returncode == 0, f"simulator tests failed ({' '.join(cmd)}):\n{report}"
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1], report
