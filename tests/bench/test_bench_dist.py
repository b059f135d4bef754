"""bench/bench_dist.py runs under mpiexec and reports all three all-reduce variants (smoke test)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_dist_quick_allreduce(tmp_path):
    pytest.importorskip("mpi4py", reason="bench_dist needs the dist extra (mpi4py + mpich)")
    out = tmp_path / "dist.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_dist.py"), "--quick", "--skip-mlp",
                        "--out", str(out)], env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=180)
    if "needs mpiexec" in p.stdout:
        pytest.skip("no mpiexec")
    assert p.returncode == 0, p.stdout
    import json
    res = json.loads(out.read_text())
    row = res["allreduce"]["4 MB"]
    assert "64 B" in res["allreduce"]
    assert set(row) == {"mpi4py Allreduce", "tj all_reduce", "tj all_reduce async+wait", "tj bucket (DDP)"}
    assert all(v["ms"] > 0 for v in row.values())
    assert "| 4 MB |" in p.stdout
