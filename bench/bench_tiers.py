"""Tiered execution and cold-compile cost of the MLP training step, in fresh processes.

    python bench/bench_tiers.py            # all probes, a table at the end (a few minutes)

Probes (each a fresh process; "cold" = an empty private kernel cache):

- ``eager``: median eager step (tracejit, no JIT);
- ``sync_cold``: first step in sync mode (today's serial cold compile), with a per-kernel
  breakdown of where the seconds go (numba's own timers: ``llvm_lock`` is time in LLVM,
  the rest of ``compiler_lock`` is numba's typing and lowering);
- ``background_cold``: first step in background mode, the steps until the entry runs
  compiled (training goes on meanwhile: time to full speed), the compiled step;
- ``background_wait``: the same, but after the first step the caller waits
  (``tj.compiler.wait()``): the compile's own time with the workers alone on the cores;
- ``warm_disk``: first step of a fresh process whose cache the cold run filled, both modes.

The MLP step is bench's `mlp` workload (batch 256, 784-1024-1024-10, LayerNorm, GELU,
cross-entropy, Adam; the model's forward is compiled). The figures depend on the load of
the machine: report them with it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _step():
    import numpy as np
    import tracejit as tj
    from bench import workloads as W
    from bench.impls import torchlike
    mode = os.environ.get("BENCH_MODE", "jit")
    compile_hook = (lambda m: m) if mode == "eager" else tj.script
    step, loss = torchlike.mlp_step(tj, compile_hook, W.mlp_data(), lambda a: tj.tensor(np.array(a)),
                                    lambda a: tj.tensor(np.array(a)))
    return tj, step, loss


def _fwd_fn(tj):
    import gc
    from tracejit.jit.function import CompiledFunction
    return [o for o in gc.get_objects() if isinstance(o, CompiledFunction)]


def probe(name: str) -> dict:
    t0 = time.perf_counter()
    tj, step, loss = _step()
    setup = time.perf_counter() - t0
    out = {"setup_s": setup}
    if name == "eager":
        step()
        ts = []
        for _ in range(7):
            t = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t)
        out["step_s"] = sorted(ts)[len(ts) // 2]
        return out
    t = time.perf_counter()
    step()
    out["first_s"] = time.perf_counter() - t
    fns = _fwd_fn(tj)
    if name == "sync_cold":
        out["kernels"] = _breakdown(fns)
    if name == "background_wait":  # the same, but the caller waits instead of training on
        tj.compiler.wait()
        step()
        out["full_speed_s"] = time.perf_counter() - t
    if name == "background_cold":
        steps = 1
        while any(s != "compiled" for f in fns for s in f.cache_stats()["tiers"]):
            step()
            steps += 1
            if time.perf_counter() - t > 600:
                break
        out["full_speed_s"] = time.perf_counter() - t
        out["tier0_steps"] = steps
    step()
    ts = []
    for _ in range(5):
        t1 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t1)
    out["steady_step_s"] = sorted(ts)[2]
    out["tiers"] = [s for f in fns for s in f.cache_stats()["tiers"]]
    return out


def _breakdown(fns) -> list:
    """Per kernel variant: numba's compile timers (seconds)."""
    rows = []
    for f in fns:
        for e in f.entries:
            ex = e.executor
            plans = [ex._infer] if getattr(ex, "_infer", None) else []
            for fwd, bwd, _ in getattr(ex, "_train", {}).values():
                plans += [p for p in (fwd, bwd) if p is not None]
            for p in plans:
                for kern in p.kernels:
                    for (layouts, parallel), disp in kern.variants.items():
                        disp = getattr(disp, "unguarded", disp)
                        for cres in getattr(disp, "overloads", {}).values():
                            timers = cres.metadata.get("timers", {}) if cres.metadata else {}
                            rows.append({"kernel": kern.label, "layouts": "/".join(layouts),
                                         "parallel": parallel,
                                         "compiler_lock_s": timers.get("compiler_lock", 0.0),
                                         "llvm_lock_s": timers.get("llvm_lock", 0.0)})
    return rows


def _run(name: str, cache: str, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TRACEJIT_CACHE_DIR=cache, TRACEJIT_COMPILE=mode,
               BENCH_MODE="eager" if name == "eager" else "jit")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "probe", name], env=env,
                       capture_output=True, text=True, timeout=1200)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    res = {}
    res["eager"] = _run("eager", tempfile.mkdtemp(), "sync")
    sync_cache, bg_cache = tempfile.mkdtemp(), tempfile.mkdtemp()
    res["sync_cold"] = _run("sync_cold", sync_cache, "sync")
    res["background_cold"] = _run("background_cold", bg_cache, "background")
    res["background_wait"] = _run("background_wait", tempfile.mkdtemp(), "background")
    res["warm_disk_background"] = _run("warm_disk", bg_cache, "background")
    res["warm_disk_sync"] = _run("warm_disk", sync_cache, "sync")
    print(json.dumps(res, indent=1))
    k = res["sync_cold"]["kernels"]
    tot = sum(r["compiler_lock_s"] for r in k)
    llvm = sum(r["llvm_lock_s"] for r in k)
    print(f"\nsync cold: {len(k)} kernel variants, {tot:.2f} s in numba "
          f"({llvm:.2f} s LLVM, {tot - llvm:.2f} s typing+lowering); first step "
          f"{res['sync_cold']['first_s']:.2f} s")
    e = res["eager"]["step_s"]
    b = res["background_cold"]
    print(f"eager step {e * 1e3:.0f} ms; background cold first step {b['first_s'] * 1e3:.0f} ms "
          f"({b['first_s'] / e:.1f}x eager); full speed after {b['full_speed_s']:.1f} s "
          f"({b['tier0_steps']} tier-0 steps); compiled step {b['steady_step_s'] * 1e3:.0f} ms")
    print(f"background cold, caller waiting (tj.compiler.wait()): full speed after "
          f"{res['background_wait']['full_speed_s']:.1f} s")
    print(f"warm disk first step: background {res['warm_disk_background']['first_s'] * 1e3:.0f} ms, "
          f"sync {res['warm_disk_sync']['first_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "probe":
        sys.path.insert(0, ROOT)
        print(json.dumps(probe(sys.argv[2])))
    else:
        main()
