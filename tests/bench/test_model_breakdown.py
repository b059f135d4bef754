"""bench/model_breakdown.py: a compiled step's calls are timed one by one under labels that
say what they are (a GEMM's shapes and operand layouts, a fused kernel's ops, a primitive's
name), primitives get the array module itself, and the plans are put back afterwards."""
from __future__ import annotations

import numpy as np

import tracejit as tj
import tracejit.nn.functional as F
from bench import breakdown, model_breakdown


def _f(x, w, b, g):
    # LayerNorm over two dims: a primitive step (over the last dim, its rows form)
    return F.layer_norm(tj.tanh(x.mm(w.t()) + b), (8, 5), g, None)


def _rows_f(x, w, b, g):
    return F.layer_norm(tj.tanh(x.mm(w.t()) + b), (5,), g, None)


def test_calls_are_labelled_timed_and_put_back(monkeypatch):
    from tracejit.ops import layer_norm_prim
    seen = []
    orig = layer_norm_prim.LAYER_NORM.impl
    monkeypatch.setattr(layer_norm_prim.LAYER_NORM, "impl",
                        lambda xp, *a, **k: seen.append(xp) or orig(xp, *a, **k))
    rng = np.random.default_rng(0)
    args = [tj.tensor(rng.standard_normal(s, dtype=np.float32)) for s in ((8, 6), (5, 6), (5,), (8, 5))]
    f = tj.script(_f)
    want = f(*args).numpy()
    # by plan, the plans kept alive by the dict: a plan of an earlier test the collector
    # frees meanwhile must not shift the comparison (as in test_breakdown)
    before = {id(p): (p, dict(p.fn.__globals__)) for p in breakdown._plans()}
    timers = model_breakdown.OpTimers()
    saved = model_breakdown._instrument(timers)
    try:
        seen.clear()
        got = f(*args).numpy()
    finally:
        for g, name, value in reversed(saved):
            g[name] = value
    np.testing.assert_array_equal(got, want)                  # the wrappers change no result
    assert seen and all(xp is np for xp in seen)               # the real array module
    labels = set(timers.calls)
    assert "gemm 8x6 @ 6x5 CF" in labels, labels               # x @ w.t(): w.t() is F
    assert any(k.startswith("kernel (") and "tanh" in k for k in labels), labels
    assert timers.calls["op layer_norm"] == 1 and timers.sec["op layer_norm"] >= 0
    after = {id(p): dict(p.fn.__globals__) for p in breakdown._plans()}
    for key, (plan, globs) in before.items():                   # everything put back
        assert after[key] == globs, sorted(k for k in globs if after[key].get(k) is not globs[k])
    f(*args)
    assert timers.calls["op layer_norm"] == 1                  # no longer counted


def test_a_rows_kernel_is_labelled_with_the_work_fused_into_it():
    """The bias add, tanh and LayerNorm's rows form are one rows kernel, timed under a
    label naming their ops."""
    rng = np.random.default_rng(1)
    args = [tj.tensor(rng.standard_normal(s, dtype=np.float32)) for s in ((8, 6), (5, 6), (5,), (5,))]
    f = tj.script(_rows_f)
    want = f(*args).numpy()
    timers = model_breakdown.OpTimers()
    saved = model_breakdown._instrument(timers)
    try:
        got = f(*args).numpy()
    finally:
        for g, name, value in reversed(saved):
            g[name] = value
    np.testing.assert_array_equal(got, want)
    rows = [k for k in timers.calls if k.startswith("kernel (") and "sum (row)" in k]
    assert len(rows) == 1 and "tanh" in rows[0] and "add" in rows[0], set(timers.calls)
    assert "op layer_norm" not in timers.calls


def _strided_f(x, y):
    # no math call: a kernel with one copies its strided operands instead (plan.py)
    return (x[:, 1] * y - 1.0) * x[:, 1]


def test_a_kernel_run_on_a_strided_operand_is_timed():
    """A plan fetches the variant for strided operands (a slice along a middle dim) from
    the family's ``ready``, not ``get``: both instrumenters time it."""
    rng = np.random.default_rng(2)
    x = tj.tensor(rng.standard_normal((6, 4, 5), dtype=np.float32))
    y = tj.tensor(rng.standard_normal((6, 5), dtype=np.float32))
    f = tj.script(_strided_f)
    want = f(x, y).numpy()
    xs = x.numpy()[:, 1]
    np.testing.assert_allclose(want, (xs * y.numpy() - 1.0) * xs, rtol=1e-6)
    timers = model_breakdown.OpTimers()
    saved = model_breakdown._instrument(timers)
    try:
        got = f(x, y).numpy()
    finally:
        for g, name, value in reversed(saved):
            g[name] = value
    np.testing.assert_array_equal(got, want)
    kern = [k for k in timers.calls if k.startswith("kernel (")]
    assert len(kern) == 1 and "mul" in kern[0] and timers.calls[kern[0]] == 1, dict(timers.calls)
    timers = breakdown.Timers()
    with breakdown.instrumented(timers):
        np.testing.assert_array_equal(f(x, y).numpy(), want)
    assert timers.calls["kernels"] == 1, dict(timers.calls)


def test_a_programs_compiled_step_gets_the_per_call_table():
    """``--program``: a bench/programs program's compiled step, its GEMMs and kernels timed
    (in a process of its own: the program runs with tracejit in place of torch)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, TRACEJIT_COMPILE="sync")
    out = subprocess.run([sys.executable, "-m", "bench.model_breakdown", "--program", "charmlp",
                          "--steps", "2"], cwd=root, env=env, capture_output=True, text=True,
                         timeout=600, check=True).stdout
    assert out.startswith("## program charmlp (compiled)"), out
    rows = [line for line in out.splitlines() if line.startswith("| gemm ")]
    assert rows and all(float(r.split("|")[3]) >= 0 for r in rows), out
