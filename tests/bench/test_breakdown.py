"""bench/breakdown.py: the compiled plans' calls are timed by kind and put back afterwards;
GEMMs are recorded with their shapes and operand layouts; the report renders the figures."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tracejit as tj
from bench import breakdown, report


def _layer(x, w, b):
    return tj.tanh(x.mm(w.t()) + b)


def _plan_globals() -> dict:
    """Every live plan's globals, by plan (the plans are kept alive by the dict: a plan of an
    earlier test the collector frees meanwhile must not shift the comparison)."""
    return {id(p): (p, dict(p.fn.__globals__)) for p in breakdown._plans()}


def test_instrumented_times_gemms_and_kernels_then_restores():
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((8, 6), dtype=np.float32))
    w = tj.tensor(rng.standard_normal((5, 6), dtype=np.float32))
    b = tj.tensor(rng.standard_normal(5, dtype=np.float32))
    # A plan of another function, alive while this test runs (as a dead one the garbage
    # collector has not freed yet can be): its kernels are wrapped too, but never called,
    # so they must not appear in the table.
    other = tj.script(lambda x: tj.exp(x) * 2.0)
    other(x)
    f = tj.script(_layer)
    want = f(x, w, b).numpy()
    before = _plan_globals()
    timers = breakdown.Timers()
    with breakdown.instrumented(timers) as n_plans:
        got = f(x, w, b).numpy()
        f(x, w, b)
    assert n_plans >= 1
    np.testing.assert_array_equal(got, want)          # the wrappers change no result
    assert timers.calls["gemm"] == 2 and timers.calls["kernels"] >= 2
    # every kernel call is also recorded under its group's label, with its arguments' bytes
    assert sum(r[1] for r in timers.kernels.values()) == timers.calls["kernels"]
    assert all(label.startswith("_layer") and r[2] >= 8 * 5 * 4
               for label, r in timers.kernels.items()), timers.kernels   # (say which, if not)
    assert timers.seconds["gemm"] > 0 and timers.seconds["kernels"] > 0
    # x (8, 6) @ w.t() (6, 5): w.t() is a transposed row-major array, BLAS takes it as is
    assert [g[:4] for g in timers.gemms] == [(8, 6, 5, "CF")] * 2
    # and with the BLAS threads the load policy gave it (blas_gemm.matmul is the plan's MATMUL)
    from tracejit.compiler.cpu.gemm import blas_gemm
    assert [g[5] for g in timers.gemms] == [blas_gemm.gemm_thread_count(8, 6, 5)] * 2
    after = _plan_globals()
    for key, (plan, globs) in before.items():   # everything put back
        assert after[key][1] == globs, sorted(k for k in globs if after[key][1].get(k) is not globs[k])
    f(x, w, b)
    assert timers.calls["gemm"] == 2                   # no longer counted


def test_other_ops_get_the_array_module_itself(monkeypatch):
    """Op impls timed as "other primitives" are called with numpy, not the stand-in that
    times matmul: impls with hand-written kernels take them only for numpy (compiler/cpu/kernels/loader.py)."""
    from tracejit.ops import layer_norm_prim
    seen = []
    orig = layer_norm_prim.LAYER_NORM.impl
    monkeypatch.setattr(layer_norm_prim.LAYER_NORM, "impl",
                        lambda xp, *a, **k: seen.append(xp) or orig(xp, *a, **k))
    # (over two dims: a primitive step; over the last dim its rows form joins the `* 2.0`)
    x = tj.tensor(np.random.default_rng(1).standard_normal((4, 2, 4), dtype=np.float32))
    f = tj.script(lambda x: tj.nn.functional.layer_norm(x, (2, 4)) * 2.0)
    want = f(x).numpy()
    timers = breakdown.Timers()
    with breakdown.instrumented(timers):
        got = f(x).numpy()
    np.testing.assert_array_equal(got, want)
    assert timers.calls["other ops"] == 1
    assert seen[-1] is np


def test_replay_on_given_blas_threads_puts_the_count_back():
    from tracejit.threads import blas_threads
    b0 = blas_threads()
    if b0 is None:
        pytest.skip("numpy's BLAS is neither OpenBLAS nor MKL here")
    seen = []
    with breakdown.blas_threads_set(1):
        seen.append(blas_threads())
    assert seen == [1] and blas_threads() == b0
    assert breakdown.sgemm_seconds(16, 8, 4, "CC", repeat=2, min_time=0, threads=1) > 0
    assert blas_threads() == b0
    assert breakdown.sgemm_rate(32, 32, 32, repeat=2, threads=1)["threads"] == 1


def test_gemm_table_keeps_thread_counts_apart():
    """A product that ran on one thread in some steps and two in others makes two rows, each
    replayed on its own count (and on the full count, for the yardstick)."""
    gemms = [(16, 8, 4, "CC", 1e-3, 1), (16, 8, 4, "CC", 2e-3, 2), (16, 8, 4, "CC", 4e-3, 2)]
    rows = breakdown._gemm_table(gemms, steps=2, repeat=2, full=2)
    assert [(r["threads"], r["per_step"]) for r in rows] == [(1, 0.5), (2, 1.0)]
    assert rows[1]["step_ms"] == pytest.approx(3.0) and rows[1]["step_min_ms"] == pytest.approx(2.0)
    assert all(r["alone_median_ms"] >= r["alone_ms"] for r in rows)
    assert all(r["alone_ms"] > 0 and r["alone_full_ms"] > 0 for r in rows)
    assert rows[1]["alone_full_ms"] == rows[1]["alone_ms"]   # already on all threads: one replay


def test_like_for_like_shares_use_one_statistic_on_both_sides():
    """0.1 GFLOP per step: fastest calls 1 ms (100 GFLOP/s) against the best 400; medians
    2 ms (50) against the best median alone (the reference's 100, above the row's 80);
    every product at its best alone 0.5 ms (200) against the best 400."""
    gemms = [{"step_ms": 1.5, "step_min_ms": 0.75, "per_step": 1, "alone_full_ms": 0.25,
              "alone_full_median_gflops": 80.0},
             {"step_ms": 0.5, "step_min_ms": 0.25, "per_step": 1, "alone_full_ms": 0.25,
              "alone_full_median_gflops": 60.0}]
    got = breakdown._like_for_like(gemms, 1e8, {"median_gflops": 100.0}, 400.0)
    assert got["gemm_step_min_ms"] == pytest.approx(1.0) and got["gemm_step_median_ms"] == pytest.approx(2.0)
    assert got["sgemm_best_median_gflops"] == 100.0
    assert got["gemm_share_best_vs_best"] == pytest.approx(0.25)
    assert got["gemm_share_median_vs_median"] == pytest.approx(0.5)
    assert got["gemm_share_ceiling"] == pytest.approx(0.5)
    assert breakdown._like_for_like([], 1e8, {}, 400.0) == {}
    best, median = breakdown.sgemm_times(16, 8, 4, "CC", repeat=5, min_time=0)
    assert 0 < best <= median


def test_layouts_and_replay():
    a = np.ones((4, 3), np.float32)
    assert breakdown._layout(a) == "C" and breakdown._layout(a.T) == "F"
    assert breakdown._layout(np.ones((4, 6), np.float32)[:, ::2]) == "S"
    rng = np.random.default_rng(0)
    for lay in "CFS":
        op = breakdown._operand((4, 3), lay, rng)
        assert op.shape == (4, 3) and breakdown._layout(op) == lay
    assert breakdown.sgemm_seconds(16, 8, 4, "FC", repeat=2, min_time=0) > 0
    assert breakdown.sgemm_seconds(16, 8, 4, "CC", repeat=2, cold=True) > 0
    r = breakdown.sgemm_rate(32, 32, 32, repeat=2)
    assert r["shape"] == [32, 32, 32] and r["gflops"] == pytest.approx(
        breakdown.gemm_flops(32, 32, 32) / (r["best_ms"] / 1e3) / 1e9)


def _fake_result():
    return {"compiled": True, "steps": 3, "plans_found": 2, "step_ms": 10.0,
            "step_instrumented_ms": 10.5,
            "phases_ms": {"forward": 3.0, "loss": 0.5, "backward": 5.0, "optimizer": 1.5,
                          "zero_grad": 0.01},
            "calls_ms": {"gemm": 5.0, "kernels": 2.0, "other ops": 0.1},
            "calls_per_step": {"gemm": 8, "kernels": 29, "other ops": 1},
            "python_ms": 0.9, "page_faults_per_step": 3.0, "gemm_gflop_per_step": 2.45, "gemm_gflops": 490.0,
            "gemm_alone_ms": 4.5, "gemm_cold_ms": 5.5, "sgemm_ref": {"shape": [256, 1024, 1024], "best_ms": 1.2,
                                                 "gflops": 447.0, "threads": 2},
            "sgemm_best_gflops": 500.0, "gemm_share_of_best": 0.98, "gemm_share_of_alone": 0.9,
            "gemm_fewer_threads_per_step": 0, "gemm_mean_ms": 5.0, "gemm_median_ms": 4.96,
            "gemm_step_min_ms": 4.9, "gemm_step_median_ms": 4.95,
            "sgemm_best_median_gflops": 450.0, "gemm_share_best_vs_best": 0.99,
            "gemm_share_median_vs_median": 0.97, "gemm_share_ceiling": 0.95,
            "threads": {"cpus": 2, "blas_threads": 2, "others_cores": 0.1},
            "kernels": [{"label": "MLP.forward_bwd_g3", "per_step": 1, "ms": 1.5, "mb": 12.0, "gbps": 8.0},
                        {"label": "MLP.forward_fwd_g4", "per_step": 1, "ms": 0.5, "mb": 4.0, "gbps": 8.0}],
            "kernel_mb_per_step": 16.0,
            "store_bandwidth": {"bandwidth_gbps": 30.0, "numba_scale_gbps": 16.0},
            "gemms": [{"m": 256, "k": 1024, "n": 1024, "layouts": "CF", "threads": 2, "per_step": 1,
                       "step_ms": 1.1, "alone_ms": 1.0, "cold_ms": 1.25, "alone_full_ms": 1.0,
                       "step_gflops": 488.0, "alone_gflops": 537.0, "alone_full_gflops": 537.0}]}


def test_others_cores_counts_other_processes_cpu_not_ours(monkeypatch):
    """`_others_cores`: the machine's busy CPU seconds less this process's, over the wall time
    of the run (readings scripted: machine 0 -> 3 s busy, this process 0 -> 1 s, 2 s)."""
    readings = iter([(10.0, 4.0), (13.0, 5.0)])
    clock = iter([100.0, 102.0])
    monkeypatch.setattr(breakdown, "_cpu_readings", lambda: next(readings))
    monkeypatch.setattr(breakdown.time, "perf_counter", lambda: next(clock))
    assert breakdown._others_cores(lambda: "ran") == ("ran", 1.0)
    monkeypatch.setattr(breakdown, "_cpu_readings", lambda: None)
    monkeypatch.setattr(breakdown.time, "perf_counter", lambda: 1.0)
    assert breakdown._others_cores(lambda: 7) == (7, None)


def test_render_and_report_section():
    text = breakdown.render(_fake_result(), {"shape": [256, 1024, 1024], "gflops": 420.0})
    assert "10.00 ms per step" in text and "3 page faults per step" in text
    assert "GEMM 5.00 ms (8 calls)" in text and "fused kernels 2.00 ms (29)" in text
    assert "Python/plan/autograd 0.90 ms" in text and "optimizer 1.50 ms" in text
    assert "490 GFLOP/s (median step: 4.96 ms of GEMM; mean 5.00) = 98% of the best sgemm rate" in text and "fresh numpy-only process: 420 GFLOP/s" in text
    assert "| 256×1024×1024 CF | 2 | 1 | 1.100 | 488 | 1.000 | 537 | 1.250 | 1.000 |" in text
    paired = _fake_result()
    paired["gemms"][0]["paired"] = True     # ran in a pair (compiler/gemm_steps.py), replayed on 2
    assert "| 256×1024×1024 CF | 2, paired | 1 | 1.100 |" in breakdown.render(paired)
    assert "4.50 ms, 5.50 ms with cold caches (90% of the step's GEMM time)" in text
    assert "on 2 threads (500 GFLOP/s" in text and "fewer BLAS threads" not in text
    assert ("GEMM share like for like: the step's GEMMs at their fastest call 4.90 ms = 99% of the best "
            "rate (best against best); at their medians 4.95 ms = 97% of the best median rate alone (450 GFLOP/s; median against median); every "
            "product at its own best alone would give 95% of the best rate") in text
    # a step whose products the load policy put on one thread says so, and why
    one = _fake_result()
    one["gemm_fewer_threads_per_step"] = 8
    one["threads"]["others_cores"] = 1.02
    assert ("8 of 8 GEMMs per step ran on fewer BLAS threads than the yardstick's 2 (tracejit.compiler.cpu.runtime.coreshare's "
            "load policy: other processes kept 1.02 cores busy at the last sample") in breakdown.render(one)
    assert ("fused kernels: 16.0 MB of arguments per step in 2.00 ms = 8.0 GB/s (this process: copy 30.0 "
            "GB/s, computed stores 16.0 GB/s); slowest: MLP.forward_bwd_g3 1.50 ms (8.0 GB/s)") in text
    # the cores other processes used during the steps, and a caution where they held a core
    busy = _fake_result()
    busy["others_cores_steps"] = [1.07, 0.15]
    assert ("other processes kept 1.07 cores busy during the steps timed whole, 0.15 during the steps "
            "with every call timed (a step waits for a core they hold") in breakdown.render(busy)
    busy["others_cores_steps"] = [0.04, 0.0]
    assert "0.04 cores busy" in breakdown.render(busy) and "a step waits" not in breakdown.render(busy)
    assert "other processes kept" not in text
    # kernel modules loaded or compiled inside the timed steps are listed; none, no line
    loaded = _fake_result()
    loaded["kernel_work_steps"] = [2, 0]
    assert ("kernel modules loaded or compiled during the steps timed whole: 2, during the steps "
            "with every call timed: 0") in breakdown.render(loaded)
    loaded["kernel_work_steps"] = [0, 0]
    assert "kernel modules loaded" not in breakdown.render(loaded)
    data = {"machine": {"sgemm": {"shape": [256, 1024, 1024], "gflops": 420.0}},
            "results": {"mlp": {"numpy": {"step_ms": 20.0},
                                "tracejit_compiled": {"step_ms": 10.0, "breakdown": _fake_result()}}}}
    sections = report.breakdown_sections(data)
    assert len(sections) == 2 and sections[1].startswith("MLP step breakdown, tracejit compiled")
    assert breakdown.render({"error": "boom"}) == "MLP step breakdown: boom"
    none_found = dict(_fake_result(), plans_found=0)
    assert "no compiled plans found" in breakdown.render(none_found)


def test_machine_sgemm_process_loads_only_numpy():
    """The fresh-process yardstick must stay free of tracejit (and numba's threads)."""
    code = ("import sys; from bench import machine; r = machine.sgemm(repeat=1); "
            "print(r['gflops'] > 0, 'tracejit' in sys.modules, 'numba' in sys.modules)")
    repo = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True, cwd=repo).stdout.split()
    assert out == ["True", "False", "False"]
