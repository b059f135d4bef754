"""The warm-disk path of background mode (compiler/tiers.py, diskcache.py): the first call
needs neither numba nor the compiled program (a background thread plans, checks the disk
and loads), the cache key's versions are the same with or without numba imported, and
a hand-written module found on disk is loaded by a thread, not by a worker.

Each probe runs in a fresh interpreter (numba must not be imported yet there), with a
private kernel cache that a first, sync-mode process fills.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.long   # tests/conftest.py: started first

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 600  # generous: a sync fill compiles a few kernels on a shared machine


def _python(code: str, cache, **env) -> dict:
    full = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(cache), **env)
    full.pop("TRACEJIT_COMPILE_WORKER_FAULT", None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


_STEP = """
    import json, sys, threading
    import numpy as np
    import tracejit as tj

    def loss_fn(x, w):
        return ((x @ w).tanh() * 1.8125 + x.sum(1, keepdim=True)).pow(2).mean()

    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    w = tj.tensor(rng.standard_normal((8, 8)).astype(np.float32), requires_grad=True)

    def step(f):
        w.grad = None
        loss = f(x, w)
        loss.backward()
        return float(loss), w.grad.numpy().tolist()
"""


def test_warm_disk_first_call_needs_no_numba_and_switches(tmp_path):
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    # Fill the cache (sync mode compiles every kernel the step's first call needs).
    filled = _python(_STEP + """
    f = tj.script(loss_fn, compile="sync")
    first = step(f)
    print(json.dumps({"tiers": f.cache_stats()["tiers"], "step": first}))
    """, cache)
    assert filled["tiers"] == ["compiled"]
    # A fresh process with a warm disk: hold the background work until the first call has
    # returned, then check what the call itself loaded.
    got = _python(_STEP + """
    from tracejit.compiler import tiers
    gate = threading.Event()
    work = tiers.TieredExecutor._work
    tiers.TieredExecutor._work = lambda self: (gate.wait(), work(self))
    f = tj.script(loss_fn, compile="background")
    eager = step(loss_fn)
    first = step(f)
    out = {"numba_after_first": "numba" in sys.modules,
           # the disk cache's and the workers' modules are the background thread's imports
           "imported_first": [m for m in ("tracejit.compiler.diskcache", "tracejit.compiler.workers",
                                          "tracejit.compiler.executor") if m in sys.modules],
           "program_built": any(e.executor._program is not None for e in f._entries),
           "tiers_first": f.cache_stats()["tiers"], "first": first, "eager": eager}
    gate.set()
    out["waited"] = tj.compiler.wait(f, timeout=300)
    out["tiers"] = f.cache_stats()["tiers"]
    out["compiled"] = step(f)
    from tracejit.compiler import diskcache, workers
    out["compiles"] = diskcache.stats()["compiles"]
    out["workers"] = workers.worker_pids()
    print(json.dumps(out))
    """, cache)
    assert got["numba_after_first"] is False and got["program_built"] is False
    assert got["imported_first"] == []
    assert got["tiers_first"] == ["tier0"] and got["first"] == got["eager"]  # tier 0 is eager
    assert got["waited"] and got["tiers"] == ["compiled"]
    assert got["compiles"] == 0 and got["workers"] == []  # all loaded from disk, no worker
    assert got["compiled"][0] == pytest.approx(filled["step"][0], rel=1e-6)
    np.testing.assert_allclose(got["compiled"][1], filled["step"][1], rtol=1e-5, atol=1e-6)


_VERSIONS = """
    import json, sys
    from tracejit.compiler import diskcache
    before = diskcache._versions()
    loaded = "numba" in sys.modules
    import numba
    diskcache._versions.cache_clear()
    after = diskcache._versions()
    print(json.dumps({"loaded": loaded, "same": before == after, "cpu": before["cpu"],
                      "features": before["cpu_features"], "numba": before["numba"],
                      "numba_version": numba.__version__}))
"""


@pytest.mark.parametrize("cpu", [None, "generic"])
def test_cache_key_versions_are_the_same_without_numba(tmp_path, cpu):
    # (the features cleared with the name: a run under bench.isa's avx2 settings has them set)
    env = {"NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": ""} if cpu else {}
    got = _python(_VERSIONS, tmp_path, **env)
    assert got["loaded"] is False            # computing them did not import numba
    assert got["same"], got                  # ... and gave what numba itself says
    assert got["numba"] == got["numba_version"]
    if cpu == "generic":
        assert got["cpu"] == "generic" and got["features"] == ""


def test_fused_module_on_disk_loads_in_a_thread_without_workers(tmp_path):
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    code = """
    import json
    from tracejit.compiler import diskcache, prepare, workers
    src = "import numba\\n@numba.njit('float64(float64)', cache=CACHE)\\ndef k(x):\\n    return x * 2.5\\n"
    if {fill!r}:
        print(json.dumps({{"v": diskcache.load_module(src, name_hint="probe").k(2.0)}}))
    else:
        first = prepare.module_when_ready(src, "probe")
        (job,) = prepare._module_jobs.values()
        ok = job.event.wait(300) and job.ok
        mod = prepare.module_when_ready(src, "probe")
        print(json.dumps({{"first": first is None, "ok": ok, "v": mod.k(2.0),
                          "pool": workers._pool is not None,
                          "compiles": diskcache.stats()["compiles"]}}))
    """
    assert _python(code.format(fill=True), cache)["v"] == 5.0
    got = _python(code.format(fill=False), cache, TRACEJIT_COMPILE="background")
    assert got == {"first": True, "ok": True, "v": 5.0, "pool": False, "compiles": 0}
