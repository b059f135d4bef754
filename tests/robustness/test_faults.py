"""Faults seen through compiled functions: a broken or unusable disk cache, numba failing
to compile a fused group, kernels that raise, concurrent callers, interrupts.

Each case checks that the user's call still gives the right answer (or a clear error),
that exactly one warning is logged for a cache fault, and that nothing broken is left in
either cache. (tests/compiler/test_diskcache.py covers the cache module on its own;
tests/compiler/test_kernel_cache.py the corrupt-entry matrix through the compiled path.)
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import diskcache
from tracejit.errors import CompileError, KernelError, ShapeError
from tracejit.ops.registry import REGISTRY
from differential import assert_same, kernel_cache_at

REPO = Path(__file__).resolve().parents[2]


def entries(root: Path) -> list:
    return sorted(p for p in root.glob("kernels/*/*") if ".tmp-" not in p.name)


def temp_dirs(root: Path) -> list:
    return sorted(root.glob("kernels/*/*.tmp-*"))


def cache_warnings(caplog) -> list:
    return [r for r in caplog.records if r.name.startswith("tracejit") and r.levelno >= logging.WARNING]


@pytest.fixture
def cache(tmp_path):
    """A private, empty disk cache, and nothing in memory: every kernel load goes to disk."""
    diskcache.clear_memory_cache()
    root = tmp_path / "cache"
    with kernel_cache_at(root):
        yield root
    diskcache.clear_memory_cache()


def softsign_sum(x, w):
    y = x * w
    return (y / (tj.abs(y) + 1.0)).sum(1), tj.tanh(y) * 2.0


def _inputs(n=5, seed=0, rg=False):
    rng = np.random.default_rng(seed)
    x = tj.tensor(rng.standard_normal((n, 7)).astype(np.float32))
    w = tj.tensor(rng.standard_normal(7).astype(np.float32))
    if rg:
        x.requires_grad_()
        w.requires_grad_()
    return x, w


def _check(cf, n=5, seed=0):
    x, w = _inputs(n, seed)
    for a, e in zip(cf(x, w), softsign_sum(x, w)):
        assert_same(a, e, f"n={n}")


# --------------------------------------------------------------------------- disk cache faults
def test_cache_root_cannot_be_created(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    diskcache.clear_memory_cache()
    with kernel_cache_at(blocker / "cache"), caplog.at_level(logging.WARNING):
        cf = tj.trace(softsign_sum)
        _check(cf)
        _check(tj.trace(lambda x, w: softsign_sum(x, w)), seed=1)   # more kernels, still one warning
    ws = cache_warnings(caplog)
    assert len(ws) == 1 and "disabled" in ws[0].getMessage() and "cannot create" in ws[0].getMessage()
    st = diskcache.stats()
    assert st["compiles"] >= 1 and st["disk_hits"] == 0
    diskcache.clear_memory_cache()


def test_cache_directory_unwritable(cache, caplog):
    cache.mkdir(mode=0o700)
    (cache / "kernels").write_text("a file where the kernels directory should be")
    with caplog.at_level(logging.WARNING):
        _check(tj.trace(softsign_sum))
        _check(tj.trace(softsign_sum), n=3)
    ws = cache_warnings(caplog)
    assert len(ws) == 1 and "cannot write" in ws[0].getMessage(), [w.getMessage() for w in ws]
    assert diskcache.stats()["write_failures"] >= 1
    assert (cache / "kernels").is_file()       # nothing was written around it


def test_cache_directory_vanishes_between_compiles(cache, caplog):
    import shutil
    _check(tj.trace(softsign_sum))
    assert entries(cache)
    shutil.rmtree(cache)
    with caplog.at_level(logging.WARNING):
        x, w = _inputs()
        g = tj.trace(lambda x, w: tj.exp(x - w))                 # new kernels: the root comes back
        assert_same(g(x, w), tj.exp(x - w), "after the cache vanished")
    assert cache_warnings(caplog) == []
    assert entries(cache)
    assert (cache.stat().st_mode & 0o777) == 0o700


def test_cache_directory_vanishes_during_a_build(cache, caplog, monkeypatch):
    import shutil
    orig = diskcache._write_manifest

    def vanish_then_write(tmp, key, *rest):
        shutil.rmtree(cache, ignore_errors=True)
        return orig(tmp, key, *rest)
    monkeypatch.setattr(diskcache, "_write_manifest", vanish_then_write)
    with caplog.at_level(logging.WARNING):
        _check(tj.trace(softsign_sum))
    ws = cache_warnings(caplog)
    assert len(ws) == 1 and "cannot write" in ws[0].getMessage()
    assert entries(cache) == [] and temp_dirs(cache) == []


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tracejit as tj
    from tracejit.compiler import diskcache

    def fn(x, w):
        y = x * w
        return (tj.sigmoid(y) * y - 0.25).sum(0)

    x = tj.tensor(np.linspace(-2, 2, 40, dtype=np.float32).reshape(8, 5)).requires_grad_()
    w = tj.tensor(np.linspace(0.5, 1.5, 5, dtype=np.float32)).requires_grad_()
    out = tj.trace(fn)(x, w)
    out.sum().backward()
    json.dump({"stats": diskcache.stats(), "out": out.detach().numpy().tolist(),
               "gx": x.grad.numpy().tolist()}, sys.stdout)
""")


def test_two_processes_compiling_the_same_kernels_at_once(cache):
    import json
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    env.pop("TRACEJIT_CACHE", None)
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=REPO) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "corrupt" not in err and "Traceback" not in err, err
        results.append(json.loads(out))
    for k in ("out", "gx"):
        np.testing.assert_array_equal(np.array(results[0][k]), np.array(results[1][k]))
    assert temp_dirs(cache) == []
    # Whoever renamed first won; the entries are complete and load in a third process.
    third = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, cwd=REPO,
                           timeout=300)
    assert third.returncode == 0, third.stderr
    st = json.loads(third.stdout)["stats"]
    assert st["compiles"] == 0 and st["corrupt_entries"] == 0 and st["disk_hits"] >= 2, st


# --------------------------------------------------------------------------- compile errors
def _lineno_of(fn, text: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def tanh_program(x):
    y = x * 2.0
    z = tj.tanh(y)              # <- the line the error must name
    return z + 1.0


def test_numba_compile_error_names_the_group_and_lines_and_caches_nothing(cache, monkeypatch):
    tanh = REGISTRY["tanh"]
    good = tanh.scalar
    cf = tj.trace(tanh_program)
    x = tj.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
    monkeypatch.setattr(tanh, "scalar", lambda e, a: f"undefined_helper_fn({a})")
    before = diskcache.stats()
    with pytest.raises(CompileError) as info:
        cf(x)
    msg = str(info.value)
    line = _lineno_of(tanh_program, "<- the line")
    assert re.search(r"fused group \d+ \(mul, tanh, add\)", msg), msg
    assert f"test_faults.py:{line}" in msg, msg
    assert "undefined_helper_fn" in msg and "def kernel(" in msg     # the generated source is shown
    # Nothing broken is cached, in memory or on disk.
    after = diskcache.stats()
    assert after["compiles"] == before["compiles"] and after["memory_hits"] == before["memory_hits"]
    assert entries(cache) == [] and temp_dirs(cache) == []
    assert cf.cache_stats()["compiles"] == 0 and cf._entries == []  # no entry kept either
    # Still broken: the same error again, not a stale half-built plan.
    with pytest.raises(CompileError):
        cf(x)
    # Fixed: the same compiled function works.
    monkeypatch.setattr(tanh, "scalar", good)
    assert_same(cf(x), tanh_program(x), "after the fix")
    assert len(entries(cache)) == 1


def test_compile_error_in_the_backward_kernel(cache, monkeypatch):
    mul = REGISTRY["mul"]
    good = mul.scalar
    cf = tj.trace(lambda x: tj.tanh(x * 3.0).sum())
    x = tj.tensor(np.linspace(-1, 1, 6, dtype=np.float32)).requires_grad_()
    calls = {"n": 0}

    def flaky(e, a, b):      # valid for the forward kernel, broken in the backward one
        calls["n"] += 1
        return good(e, a, b) if calls["n"] == 1 else f"({a} * {b}) +* 1"
    monkeypatch.setattr(mul, "scalar", flaky)
    with pytest.raises(CompileError, match=r"fused group \d+"):
        cf(x)
    monkeypatch.setattr(mul, "scalar", good)
    cf(x).backward()
    xe = tj.tensor(x.detach().numpy()).requires_grad_()
    tj.tanh(xe * 3.0).sum().backward()
    assert_same(x.grad, xe.grad, "gradient after the fix")


def _negative_trap(e, a):
    # A tanh that raises inside the kernel for negative inputs (numba: negative dimension).
    return f"(np.float32(np.tanh({a})) if {a} >= 0 else np.float32(np.empty(-1)[0]))"


def test_kernel_that_raises_leaves_the_function_usable(cache, monkeypatch):
    monkeypatch.setattr(REGISTRY["tanh"], "scalar", _negative_trap)
    cf = tj.trace(tanh_program)
    good = tj.tensor(np.linspace(0.1, 1, 6, dtype=np.float32))
    bad = tj.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
    with pytest.raises(Exception) as info:
        cf(bad)
    assert not isinstance(info.value, AssertionError)
    assert_same(cf(good), tanh_program(good), "a later call")
    assert cf.cache_stats()["entries"] == 1


def test_kernel_that_raises_names_the_group(cache, monkeypatch):
    monkeypatch.setattr(REGISTRY["tanh"], "scalar", _negative_trap)
    cf = tj.trace(tanh_program)
    bad = tj.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
    first = tanh_program.__code__.co_firstlineno
    lines = ", ".join(f"test_faults.py:{first + k}" for k in (1, 2, 3))
    with pytest.raises(KernelError, match=re.escape(
            f"the kernel of fused group 0 (mul, tanh, add) from {lines} raised ValueError: "
            "negative dimensions not allowed")) as info:
        cf(bad)
    assert isinstance(info.value.__cause__, ValueError)


def test_kernel_that_raises_in_backward_names_the_group(cache, monkeypatch):
    # tanh's VJP multiplies by 1 - y*y: trap the backward's mul on a negative cotangent.
    def trap(e, a, b):
        return f"(({a}) * ({b}) if ({a}) >= 0 and ({b}) >= 0 else np.float32(np.empty(-1)[0]))"
    monkeypatch.setattr(REGISTRY["mul"], "scalar", trap)
    x = tj.tensor(np.linspace(0.1, 1, 6, dtype=np.float32), requires_grad=True)
    y = tj.trace(lambda a: tj.tanh(a * 3.0))(x)       # the forward only meets positive values
    with pytest.raises(KernelError, match=r"the kernel of fused group \d+ \(.*mul.*\) from "
                                          r"test_faults.py:\d+ raised ValueError"):
        y.backward(tj.tensor(-np.ones(6, np.float32)))


def test_errors_not_from_kernels_pass_through_unchanged(cache):
    # A shape error found while capturing is the user's own error, not a kernel's.
    with pytest.raises(ShapeError) as info:
        tj.trace(lambda a, b: a + b)(tj.ones(2, 3), tj.ones(4))
    assert not isinstance(info.value, KernelError) and info.value.__cause__ is None


# --------------------------------------------------------------------------- interrupts
@pytest.mark.parametrize("where", ["numba-compile", "after-compile"])
def test_keyboard_interrupt_during_compilation_leaves_no_half_built_entry(cache, monkeypatch, where):
    from numba.core import dispatcher
    if where == "numba-compile":
        target, name = dispatcher.Dispatcher, "compile"
    else:  # numba has written its cache files into the entry being built; no manifest yet
        target, name = diskcache, "_write_manifest"

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    cf = tj.trace(softsign_sum)
    with monkeypatch.context() as m:
        m.setattr(target, name, interrupt)
        with pytest.raises(KeyboardInterrupt):
            _check(cf)
    assert entries(cache) == [] and temp_dirs(cache) == []
    if where == "numba-compile":   # no half-executed kernel module is left importable
        assert not any("softsign_sum" in k for k in sys.modules if k.startswith("tracejit_kernels"))
    before = diskcache.stats()
    # The same function recovers (compiling again: nothing was kept in memory either), and
    # its entries are complete (a fresh load is a disk hit).
    _check(cf)
    assert diskcache.stats()["compiles"] > before["compiles"]
    n = len(entries(cache))
    assert n >= 1
    diskcache.clear_memory_cache()
    _check(tj.trace(softsign_sum))
    st = diskcache.stats()
    assert st["disk_hits"] == n and st["compiles"] == 0 and st["corrupt_entries"] == 0, st


# --------------------------------------------------------------------------- threads
def test_threads_calling_one_function_with_different_shapes(cache):
    cf = tj.trace(softsign_sum)
    sizes = [2, 3, 5, 8, 13, 21]
    n_threads, rounds = 6, 4
    barrier = threading.Barrier(n_threads)
    errors: list = []
    calls = {"n": 0}
    lock = threading.Lock()

    def worker(t):
        try:
            barrier.wait()
            for r in range(rounds):
                n = sizes[(t + r) % len(sizes)]
                grad = (t + r) % 2 == 0
                x, w = _inputs(n, seed=t * 10 + r, rg=grad)
                outs = cf(x, w)
                xe, we = (tj.tensor(v.detach().numpy()).requires_grad_() for v in (x, w))
                exp = softsign_sum(xe, we)
                for a, e in zip(outs, exp):
                    assert_same(a, e, f"thread {t} round {r} n={n}")
                if grad:
                    (outs[0].sum() + outs[1].sum()).backward()
                    (exp[0].sum() + exp[1].sum()).backward()
                    assert_same(x.grad, xe.grad, f"thread {t} round {r}: dx")
                    assert_same(w.grad, we.grad, f"thread {t} round {r}: dw")
                with lock:
                    calls["n"] += 1
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append((t, e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not errors, errors[0]
    st = cf.cache_stats()
    assert calls["n"] == n_threads * rounds
    assert st["hits"] + st["misses"] == calls["n"], st
    assert st["entries"] == st["compiles"] <= 6, st            # static + dynamic, with/without grad
    assert temp_dirs(cache) == []
    # The kernels on disk are complete: a fresh load needs no compilation.
    diskcache.clear_memory_cache()
    _check(tj.trace(softsign_sum), n=4)
    assert diskcache.stats()["compiles"] == 0 and diskcache.stats()["corrupt_entries"] == 0


def test_compile_error_of_a_lazily_compiled_variant_stays_a_compile_error(cache, monkeypatch):
    # The parallel variant is compiled inside the plan, on the first call large enough: its
    # CompileError (which names the group itself) is not re-wrapped as a KernelError.
    from tracejit.compiler import plan as plan_mod
    real_get = plan_mod._Kernel.get

    def get(self, layouts, parallel=False):
        if parallel:
            raise CompileError("fused group 0 (test): the parallel variant failed")
        return real_get(self, layouts, parallel)
    monkeypatch.setattr(plan_mod._Kernel, "get", get)
    big = tj.tensor(np.linspace(-1, 1, plan_mod.PARALLEL_MIN + 1, dtype=np.float32))
    with pytest.raises(CompileError, match="the parallel variant failed") as info:
        tj.trace(tanh_program)(big)
    assert not isinstance(info.value, KernelError)
