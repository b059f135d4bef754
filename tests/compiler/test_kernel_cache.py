"""The kernel cache seen through compiled functions: reuse across sizes, reuse across
processes (the disk cache), recovery from corrupt entries.

``tests/compiler/test_diskcache.py`` tests the cache module on hand-written sources;
these tests go through ``tj.trace`` so they also check what the code generator feeds it
(sources without sizes, one source per structure) and that the plans survive a broken
cache.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import diskcache
from tracejit.compiler.plan import PARALLEL_MIN
from differential import assert_same, kernel_cache_at

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


@pytest.fixture
def fresh_cache(tmp_path):
    """An empty disk cache and an empty in-process cache (so loads really go to disk)."""
    diskcache.clear_memory_cache()
    with kernel_cache_at(tmp_path / "kernels-cache"):
        yield tmp_path / "kernels-cache"
    diskcache.clear_memory_cache()


def _entries(root: Path) -> list:
    kernels = root / "kernels"
    if not kernels.exists():
        return []
    return sorted(p for shard in kernels.iterdir() for p in shard.iterdir() if ".tmp-" not in p.name)


def _all_kernel_sources(entries) -> list:
    out = []
    for e in entries:
        prog = e.executor
        if prog._infer is not None:
            out += prog._infer.kernel_sources()
        for fwd, bwd, _ in prog._train.values():
            out += fwd.kernel_sources() + bwd.kernel_sources()
    return out


def mlp_piece(x, w, b):
    h = x * w + b
    return (tj.tanh(h) * h).sum(1)


# --------------------------------------------------------------------------- sizes
def test_batch_size_sweep_compiles_each_kernel_once():
    rng = np.random.default_rng(0)
    w = tj.tensor(rng.standard_normal(29).astype(np.float32)).requires_grad_()
    b = tj.tensor(rng.standard_normal(29).astype(np.float32)).requires_grad_()
    cf = tj.trace(mlp_piece)
    sizes = [37, 53, 71, 83, 97, 41]
    compiles = []
    for n in sizes:
        x = tj.tensor(rng.standard_normal((n, 29)).astype(np.float32)).requires_grad_()
        out = cf(x, w, b)
        g = tj.tensor(rng.standard_normal(n).astype(np.float32))
        gx, gw, gb = tj.autograd.grad(out, [x, w, b], g)
        x2, w2, b2 = (tj.tensor(t.detach().numpy()).requires_grad_() for t in (x, w, b))
        ref = mlp_piece(x2, w2, b2)
        rx, rw, rb = tj.autograd.grad(ref, [x2, w2, b2], g)
        for a, e, what in ((out, ref, "out"), (gx, rx, "dx"), (gw, rw, "dw"), (gb, rb, "db")):
            assert_same(a, e, f"n={n}: {what}")
        compiles.append(diskcache.stats()["compiles"])
    # Sizes 2.. reuse the kernels of size 1 (the dynamic recapture generates the same sources).
    assert compiles[1:] == [compiles[0]] * (len(sizes) - 1), compiles
    st = cf.cache_stats()
    assert st["entries"] <= 3 and st["dynamic_dims"], st
    sources = _all_kernel_sources(cf._entries)
    assert sources
    for src in sources:
        for n in sizes + [29]:
            assert not re.search(rf"\b{n}\b", src), f"size {n} baked into a kernel:\n{src}"
    # Every capture generated the same kernels: one source per structure/layout.
    first = set(_all_kernel_sources(cf._entries[:1]))
    assert set(sources) == first


def test_large_sizes_compile_the_parallel_twin_once():
    rng = np.random.default_rng(1)
    f = tj.trace(lambda x, y: tj.exp(x * y - 1.0).sum(0))
    per_size = []
    for n in (PARALLEL_MIN // 16 + 7, PARALLEL_MIN // 16 + 31, PARALLEL_MIN // 16 + 100):
        x = tj.tensor(rng.standard_normal((n, 16)).astype(np.float32))
        y = tj.tensor(rng.standard_normal((n, 16)).astype(np.float32))
        assert_same(f(x, y), tj.exp(x * y - 1.0).sum(0), f"n={n}")
        per_size.append(diskcache.stats()["compiles"])
    assert per_size[1] == per_size[2], per_size   # the third size compiles nothing new
    srcs = _all_kernel_sources(f._entries)
    # a parfor kernel, or a chunk kernel taking its share of the chunks (codegen_chunks.paired:
    # the column sum where the machine pairs its kernels on OpenBLAS's worker)
    assert any("prange(" in s or "chunk_t" in s for s in srcs), "no parallel kernel for a large input"
    assert True in {par for _, par in _variants(f)}


def _variants(f) -> set:
    """(group id, parallel) of every compiled kernel variant in `f`'s inference plans."""
    out = set()
    for e in f._entries:
        plan = e.executor._infer
        for k in plan.kernels:
            out |= {(k.group.gid, par) for (_, par) in k.variants}
    return out


@pytest.mark.parametrize("n,want", [(PARALLEL_MIN // 16 + 1, {True}), (PARALLEL_MIN // 16 - 1, {False})])
def test_a_fixed_size_compiles_only_the_twin_it_needs(fresh_cache, n, want):
    rng = np.random.default_rng(2)
    f = tj.trace(lambda x, y: tj.sigmoid(x) * y + 0.5)
    x, y = (tj.tensor(rng.standard_normal((n, 16)).astype(np.float32)) for _ in range(2))
    assert_same(f(x, y), tj.sigmoid(x) * y + 0.5, f"n={n}")
    assert {par for _, par in _variants(f)} == want
    assert diskcache.stats()["compiles"] == 1


def test_symbolic_sizes_compile_each_twin_on_the_first_call_that_wants_it(fresh_cache):
    rng = np.random.default_rng(3)
    f = tj.trace(lambda x: tj.exp(x) - x)
    big = PARALLEL_MIN // 16
    for n in (big + 3, big + 5, big + 7):  # the third size is captured with a symbolic first dim
        x = tj.tensor(rng.standard_normal((n, 16)).astype(np.float32))
        assert_same(f(x), tj.exp(x) - x, f"n={n}")
    assert f.cache_stats()["dynamic_dims"]
    # new batch sizes on the same side of PARALLEL_MIN: no serial twin, one numba compile
    assert {par for _, par in _variants(f)} == {True}
    assert diskcache.stats()["compiles"] == 1
    for n in (5, 9):
        x = tj.tensor(rng.standard_normal((n, 16)).astype(np.float32))
        assert_same(f(x), tj.exp(x) - x, f"n={n}")
    assert {par for _, par in _variants(f)} == {False, True}
    assert diskcache.stats()["compiles"] == 2
    assert f.cache_stats()["compiles"] == len(f._entries)  # the small sizes needed no capture


# --------------------------------------------------------------------------- processes
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tracejit as tj
    from tracejit.compiler import diskcache

    def fn(x, w):
        return (tj.sigmoid(x * w) * 3.0 - x).pow(2).sum(1)

    rng = np.random.default_rng(5)
    x = tj.tensor(rng.standard_normal((6, 11)).astype(np.float32)).requires_grad_()
    w = tj.tensor(rng.standard_normal(11).astype(np.float32)).requires_grad_()
    out = tj.trace(fn)(x, w)
    out.sum().backward()
    json.dump({"stats": diskcache.stats(), "out": out.detach().numpy().tolist(),
               "gx": x.grad.numpy().tolist(), "gw": w.grad.numpy().tolist()}, sys.stdout)
""")


def run_child(cache: Path, code: str = _CHILD, **env) -> dict:
    e = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache), PYTHONPATH=str(REPO), **env)
    e.pop("TRACEJIT_CACHE", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=REPO,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_disk_cache_hit_in_a_fresh_process(tmp_path):
    cache = tmp_path / "cache"
    first = run_child(cache)
    assert first["stats"]["compiles"] >= 2 and first["stats"]["disk_hits"] == 0, first["stats"]
    n_entries = len(_entries(cache))
    assert n_entries == first["stats"]["compiles"]
    second = run_child(cache)
    assert second["stats"]["compiles"] == 0, second["stats"]
    assert second["stats"]["disk_hits"] == first["stats"]["compiles"]
    assert second["stats"]["corrupt_entries"] == 0
    for k in ("out", "gx", "gw"):
        np.testing.assert_array_equal(np.array(second[k]), np.array(first[k]))
    assert len(_entries(cache)) == n_entries


# --------------------------------------------------------------------------- corrupt entries
def tiny(x):
    return tj.exp(x * 0.5) - x * x


def _corrupt(entry: Path, how: str) -> None:
    pyc = entry / "__pycache__"
    if how == "truncated":
        for p in pyc.glob("*.nbc"):
            data = p.read_bytes()
            p.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        for p in pyc.glob("*.nbi"):
            p.write_bytes(os.urandom(p.stat().st_size))
    elif how == "half_written":       # a writer died before writing its manifest
        (entry / "manifest.json").unlink()
    elif how == "other_version":
        m = json.loads((entry / "manifest.json").read_text())
        m["versions"]["numba"] = "0.0.1"
        (entry / "manifest.json").write_text(json.dumps(m))
    elif how == "edited_source":
        src = (entry / "kernel.py").read_text()
        (entry / "kernel.py").write_text(src.replace("np.float32(0.5)", "np.float32(7.0)"))
    elif how == "extra_file":
        (pyc / "extra.nbc").write_bytes(b"\x80\x04N.")
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["truncated", "garbage", "half_written", "other_version", "edited_source",
                                 "extra_file"])
def test_corrupt_entry_is_discarded_rebuilt_and_never_run(fresh_cache, how, caplog):
    x = tj.tensor(np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6))
    expect = tiny(x)
    assert_same(tj.trace(tiny)(x), expect, "first build")
    entries = _entries(fresh_cache)
    assert len(entries) == 1
    _corrupt(entries[0], how)

    diskcache.clear_memory_cache()
    with caplog.at_level(logging.WARNING, logger="tracejit"):
        assert_same(tj.trace(tiny)(x), expect, f"after a {how} entry")
    st = diskcache.stats()
    assert st["corrupt_entries"] == 1 and st["compiles"] == 1 and st["disk_hits"] == 0, st
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "corrupt entry" in warnings[0].getMessage(), warnings
    # The rebuilt entry is good: a fresh start loads it from disk.
    diskcache.clear_memory_cache()
    assert_same(tj.trace(tiny)(x), expect, "after the rebuild")
    st = diskcache.stats()
    assert st == dict(st, disk_hits=1, compiles=0, corrupt_entries=0), st
    assert len(_entries(fresh_cache)) == 1


def test_cache_off_writes_nothing_and_still_compiles(tmp_path):
    diskcache.clear_memory_cache()
    root = tmp_path / "unused"
    with kernel_cache_at(None):
        os.environ["TRACEJIT_CACHE_DIR"] = str(root)
        x = tj.tensor(np.arange(6, dtype=np.float32))
        assert_same(tj.trace(tiny)(x), tiny(x), "cache off")
        assert diskcache.stats()["compiles"] == 1
    assert not root.exists()
    diskcache.clear_memory_cache()
