"""Tests for tracejit.compiler.cacheload: disk-cache loads without numba's registry refresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba.core import caching

from tracejit.compiler import cacheload

REPO = Path(__file__).resolve().parents[2]


def test_replacement_is_installed_only_inside_the_block():
    original = vars(caching.Cache)["load_overload"]
    with cacheload.deferred_refresh() as deferred:
        assert deferred is True
        assert vars(caching.Cache)["load_overload"] is not original
        assert "deferred_refresh" in caching.Cache.load_overload.__qualname__
    assert vars(caching.Cache)["load_overload"] is original


def test_original_is_restored_after_an_error():
    original = vars(caching.Cache)["load_overload"]
    with pytest.raises(KeyboardInterrupt):
        with cacheload.deferred_refresh():
            raise KeyboardInterrupt
    assert vars(caching.Cache)["load_overload"] is original


def test_a_cache_class_of_another_shape_is_left_alone():
    class Inherited(caching.Cache):  # load_overload not defined on the class itself
        pass

    class Missing:
        def load_overload(self, sig, target_context):
            return None

    assert cacheload._replacement(Inherited) is None
    assert cacheload._replacement(Missing) is None
    assert cacheload._replacement(caching.Cache) is not None


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import numba
    import tracejit as tj
    from tracejit.compiler import diskcache
    # numba modules a warm load must not import (unless numba's own import already did)
    HEAVY = [m for m in ("numba.np.linalg", "numba.np.arrayobj") if m not in sys.modules]

    rng = np.random.default_rng(3)
    x = tj.tensor(rng.standard_normal((64, 100), dtype=np.float32))
    y = tj.tensor(rng.standard_normal((64, 10), dtype=np.float32))
    w1 = tj.tensor(rng.standard_normal((100, 50), dtype=np.float32) * 0.1, requires_grad=True)
    w2 = tj.tensor(rng.standard_normal((50, 10), dtype=np.float32) * 0.1, requires_grad=True)

    @tj.trace
    def loss_fn(x, y, w1, w2):
        return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()

    loss = loss_fn(x, y, w1, w2)
    loss.backward()
    out = {"loss": float(loss.item()), "g1": w1.grad.numpy().tolist(),
           "g2": w2.grad.numpy().tolist(), "stats": diskcache.stats(),
           # refresh() imports linalg; reshape, np.empty & co. inside a kernel import
           # arrayobj when the kernel's environment is rebuilt
           "imported": [m for m in HEAVY if m in sys.modules]}

    # After a deferred refresh, numba must still compile what needs its registries
    # (user code, and a tracejit kernel that is not on disk yet).
    if len(sys.argv) > 1:
        z = tj.tensor(rng.standard_normal(7, dtype=np.float32))
        out["new"] = tj.trace(lambda z: tj.exp(z) * 2.0 - 1.0)(z).numpy().tolist()
        out["new_expected"] = (np.exp(z.numpy()) * 2.0 - 1.0).tolist()
    # Typed List, array math (np.sort, np.cumsum) and np.random all live in registries
    # the deferred refresh must install before this compile. (np.linalg would also need
    # scipy, which no extra installs: numba's linear algebra calls scipy's BLAS.)
    @numba.njit
    def user(a):
        seen = numba.typed.List.empty_list(numba.float64)
        seen.append(np.sort(a)[-1] + np.cumsum(a)[-1])
        return seen[0] + np.random.random() * 0.0
    a = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    out["user"] = user(a)
    out["user_expected"] = 5.0 + 14.0
    json.dump(out, sys.stdout)
""")


def _run(cache: Path, *args: str) -> dict:
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    env.pop("TRACEJIT_CACHE", None)
    env.pop("TRACEJIT_EAGER", None)
    p = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_warm_process_loads_without_refresh_and_numba_still_compiles(tmp_path):
    cache = tmp_path / "cache"
    cold = _run(cache)
    assert cold["stats"]["compiles"] >= 2 and "numba.np.linalg" in cold["imported"]
    warm = _run(cache, "and a new kernel")
    assert warm["stats"]["compiles"] == 0 and warm["stats"]["disk_hits"] == cold["stats"]["compiles"]
    assert warm["stats"]["corrupt_entries"] == 0
    assert warm["imported"] == [], "the warm load ran numba's registry refresh or rebuilt arrayobj"
    # same machine code, same inputs: bitwise the cold process's results
    assert warm["loss"] == cold["loss"]
    for k in ("g1", "g2"):
        np.testing.assert_array_equal(np.array(warm[k]), np.array(cold[k]))
    assert warm["user"] == pytest.approx(warm["user_expected"], rel=1e-12)
    np.testing.assert_allclose(warm["new"], warm["new_expected"], rtol=1e-5)
