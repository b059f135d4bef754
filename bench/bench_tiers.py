"""Tiered execution and cold-compile cost of training steps, in fresh processes.

    python bench/bench_tiers.py                      # MLP step, all probes (several minutes)
    python bench/bench_tiers.py --step mlp2 --probes eager,warm_disk
    python bench/bench_tiers.py --step cnn,lstm,transformer

Steps (``--step``, comma-separated): ``digits`` (the digits MLP: batch 64, 64-256-256-10,
ReLU, cross-entropy, Adam), ``mlp`` (bench's `mlp` workload: batch 256,
784-1024-1024-10, LayerNorm, GELU, cross-entropy, Adam; the model's forward is compiled),
``mlp2`` (the two-layer step: 64x1000-100-10, the loss function compiled, SGD by hand),
``cnn``, ``lstm``, ``transformer`` (bench/impls/models.py, the model compiled, SGD).

Probes (``--probes``; each a fresh process; "cold" = an empty private kernel cache):

- ``eager``: first and median eager step (tracejit, no JIT): the scale for the others;
- ``tier0_ratio``: one process on one thread (OpenMP, OpenBLAS and numba: 1), an eager
  model and a compiled one of the same step, their steps interleaved: the median tier-0
  step over the median eager step, first with the background work held (tier 0's own
  cost: capture excluded, the first call is not counted), then while it plans, compiles
  and loads (a cold cache: what a user's first seconds see) until the entry switches;
- ``sync_cold``: first step in sync mode (the serial cold compile), with a per-kernel
  breakdown of where the seconds go (numba's own timers: ``llvm_lock`` is time in LLVM,
  the rest of ``compiler_lock`` is numba's typing and lowering);
- ``background_cold``: first step in background mode, the steps until the entry runs
  its compiled kernels (training goes on meanwhile), and until every eager and
  hand-written kernel its ops asked for is in (convolution's fold, BatchNorm, pooling, the
  recurrent loops: numpy's forms run them until then), the compiled step; and the first
  step on compiled kernels with every kernel it asked for in, row kernels' GIL-free pairs
  included (``step_kernels_in_s``); and the first step after that with no worker compiling
  during it (``quiet_s``, "no worker compiling after"): from then on the step runs at its
  full speed;
- ``background_wait``: the same, but after the first step the caller waits
  (``tj.compiler.wait()``): the compile's own time with the workers alone on the cores;
- ``warm_disk``: first step of a fresh process whose cache a cold run filled, in both
  modes (``warm_disk_background``, ``warm_disk_sync``), and the tier of its first steps;
  the cache comes from a background run that waited for its kernels (``fill``, as a
  user's first run with ``tj.compiler.wait()``), or from ``--warm-cache``.
  Steps 2..10 of the background process are timed against the eager probe's (wall and
  CPU), and steps 1..10 in all: the eager process pays numba's import and its eager
  kernels' loads in its first step (from the warm cache too with ``--warm-cache``),
  the background process in its later steps' threads.

The probes import tracejit from bytecode compiled first into its ``__pycache__``
(bench/bytecode.py; ``--source-only``: not compiled first, as the shell has it): a shell
with ``PYTHONDONTWRITEBYTECODE=1`` and a tree without ``__pycache__`` otherwise compiles, in
a first call, each module the call imports lazily (the CNN's first step: ~10 ms, against
~1.2 ms from bytecode), which no installed package does.

Every figure depends on the load of the machine: the table prints ``uptime`` with them;
compare figures of one run only.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


STEPS = ("digits", "mlp", "mlp2", "cnn", "lstm", "transformer")
PROBES = ("eager", "tier0_ratio", "sync_cold", "background_cold", "background_wait", "warm_disk")


def _step():
    import numpy as np
    import tracejit as tj
    from bench import workloads as W
    from bench.impls import torchlike
    mode = os.environ.get("BENCH_MODE", "jit")
    which = os.environ.get("BENCH_STEP", "mlp")
    compile_hook = (lambda m: m) if mode == "eager" else tj.script

    def tensor(a, requires_grad=False):
        return tj.tensor(np.array(a), requires_grad=requires_grad)
    if which == "digits":
        step, loss = _digits_step(tj, compile_hook)
    elif which == "mlp":
        step, loss = torchlike.mlp_step(tj, compile_hook, W.mlp_data(), tensor, tensor)
    elif which == "mlp2":
        step, loss = torchlike.mlp2_step(tj, compile_hook, W.mlp2_data(), tensor)
    else:
        from bench.impls import models
        step, loss = models.model_step(tj, compile_hook, which)
    return tj, step, loss


def _digits_step(tj, compile_hook):
    """The digits MLP's step (sklearn's 8x8 digits: 64 features, 10 classes; random data of
    those shapes, no download): 64-256-256-10, ReLU, cross-entropy, Adam, batch 64."""
    import numpy as np
    from bench.impls.torchlike import train_step
    tj.manual_seed(0)
    nn = tj.nn
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    y = tj.tensor(rng.integers(0, 10, 64))
    opt = tj.optim.Adam(model.parameters(), lr=1e-3)
    return train_step(opt, compile_hook(model), tj.nn.functional.cross_entropy, x, y)


def _fwd_fn(tj):
    import gc
    from tracejit.jit.function import CompiledFunction
    return [o for o in gc.get_objects() if isinstance(o, CompiledFunction)]


def probe(name: str) -> dict:
    if name == "tier0_ratio":
        return _tier0_ratio()
    t0 = time.perf_counter()
    tj, step, loss = _step()
    setup = time.perf_counter() - t0
    out = {"setup_s": setup}
    if name == "eager":
        t, c = time.perf_counter(), time.thread_time()
        step()
        out["first_s"] = time.perf_counter() - t
        out["first_cpu_s"] = time.thread_time() - c
        ts = _walls(step, STEPS_AFTER, out)
        out["steps_after_s"] = ts   # steps 2..N (N = 1 + STEPS_AFTER)
        out["step_s"] = sorted(ts)[len(ts) // 2]
        return out
    capture_s = _time_captures()
    t, c = time.perf_counter(), time.thread_time()
    step()
    out["first_s"] = time.perf_counter() - t
    out["first_cpu_s"] = time.thread_time() - c  # the calling thread's CPU time alone
    out["capture_s"] = sum(capture_s)
    fns = _fwd_fn(tj)
    tier0 = [e.executor._tier0_s for f in fns for e in f.entries
             if getattr(e.executor, "_tier0_s", None) is not None]
    if tier0:
        out["tier0_fwd_s"] = sum(tier0)  # the forward call on tier 0 (the step's rest is eager)
    if name == "sync_cold":
        out["kernels"] = _breakdown(fns)
    if name == "warm_disk":
        # Steps 2..N as they come (a background process loads its kernels meanwhile and
        # its second step waits for them): against the eager probe's steps 2..N.
        out["tiers_by_step"] = [_tiers(fns)]
        out["steps_after_s"] = _walls(step, STEPS_AFTER, out, lambda: out["tiers_by_step"].append(_tiers(fns)))
    if name == "fill":   # a user's first run: it trains a little, then waits for its kernels
        for _ in range(3):
            step()
        tj.compiler.wait()
        for _ in range(3):   # (compiled steps ask for kernels of their own: fused Adam's)
            step()
        _until_no_job_left()
    if os.environ.get("BENCH_FIRST_ONLY") and name == "background_cold":
        return out
    if name == "background_wait":  # the same, but the caller waits instead of training on
        tj.compiler.wait()
        step()
        out["all_in_s"] = time.perf_counter() - t
        out["full_speed_s"] = out["all_in_s"]
        out["kept"] = _kept(fns)
    if name == "background_cold":
        steps = 1
        while any(s != "compiled" for f in fns for s in f.cache_stats()["tiers"]):
            _timed_ask(step, fns, t, steps, out)
            steps += 1
            if time.perf_counter() - t > 600:
                break
        out["full_speed_s"] = time.perf_counter() - t
        out["steps_to_full_speed"] = steps
        out["tier0_steps"] = steps
        out["kept"] = _kept(fns)
        # The plans' kernels are in; the hand-written and eager kernels their ops call
        # (convolution's fold, BatchNorm, pooling, the recurrent loops) come on their own
        # time, and until they do those ops run their numpy forms: the step is at full
        # speed when none is pending. Training goes on meanwhile, as for a user.
        counter = [steps]

        def watched():
            _timed_ask(step, fns, t, counter[0], out)
            counter[0] += 1
        asked = time.monotonic()
        out["final_step_s"] = _median_step(watched, 3)
        steps += 3
        out.update(_until_eager_kernels_in(watched, t, steps, asked))
        if not out["kernels_left"]:
            _note_kernels_in(out, t, out["steps_to_kernels_in"])
        _until_workers_quiet(watched, out)
    step()
    ts = []
    for _ in range(5):
        t1 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t1)
    out["steady_step_s"] = sorted(ts)[2]
    # The thread policy's state at the steady step (tracejit/compiler/cpu/runtime/coreshare.py): which of its two
    # speeds the step landed in (two threads, or one and the partner) and what it read.
    from tracejit.compiler.cpu.runtime import coreshare
    cs = coreshare.core_share
    out["policy"] = {"threads": cs._count, "others": round(cs.others, 2),
                     "trials": cs.trials, "kept": cs.trials_kept}
    out["tiers"] = [s for f in fns for s in f.cache_stats()["tiers"]]
    return out


STEPS_AFTER = 9   # steps 2..10 of the eager and warm_disk probes


def _tiers(fns) -> str:
    """The tiers of every entry now, one string ("compiled", "tier0,compiled", ...)."""
    return ",".join(t for f in fns for t in f.cache_stats()["tiers"])


def _until_no_job_left(limit_s: float = 600.0) -> None:
    """Until the compile workers have no job left (the optimizer's and eager kernels' too):
    the next process then finds every kernel on disk."""
    from tracejit.compiler import workers
    t = time.monotonic()
    while time.monotonic() - t < limit_s:
        pool = workers._pool
        # (an older tree's pool has no `unfinished`: this bench measures trees side by side)
        if pool is None or not hasattr(pool, "unfinished") or not pool.unfinished():
            return
        time.sleep(0.1)


# tier0_ratio: interleaved pairs (eager step, tier-0 step) with the background work held,
# after this many pairs to warm up (the eager kernels, numpy's and BLAS's first calls)
RATIO_WARMUP, RATIO_PAIRS = 5, 40
RATIO_LIMIT_S = 60.0    # at most this long per phase (a slow step: fewer pairs)


def _tier0_ratio() -> dict:
    """See the module docstring (``tier0_ratio``)."""
    import statistics
    import threading
    from tracejit.compiler import tiers
    gate = threading.Event()
    work = tiers.TieredExecutor._work
    tiers.TieredExecutor._work = lambda self: (gate.wait(), work(self))
    os.environ["BENCH_MODE"] = "eager"
    tj, eager, _ = _step()
    os.environ["BENCH_MODE"] = "jit"
    _, jit, _ = _step()
    fns = _fwd_fn(tj)
    t = time.perf_counter()
    jit()
    out = {"first_s": time.perf_counter() - t}
    t = time.perf_counter()
    eager()
    out["eager_first_s"] = time.perf_counter() - t

    def pairs(n, while_tier0):
        e, j = [], []
        since = time.perf_counter()
        while len(j) < n and time.perf_counter() - since < RATIO_LIMIT_S:
            t0 = time.perf_counter()
            eager()
            t1 = time.perf_counter()
            jit()
            t2 = time.perf_counter()
            if while_tier0 and _tiers(fns) != ",".join(["tier0"] * len(fns)):
                break   # (this call may have switched: not counted)
            e.append(t1 - t0)
            j.append(t2 - t1)
        return e, j
    pairs(RATIO_WARMUP, False)
    e, j = pairs(RATIO_PAIRS, False)
    out["held"] = {"pairs": len(j), "eager_s": statistics.median(e), "tier0_s": statistics.median(j),
                   "ratio": statistics.median(j) / statistics.median(e)}
    gate.set()   # the background work starts: the planning, the workers, the loads
    e, j = pairs(10 ** 6, True)
    if j:
        out["compiling"] = {"pairs": len(j), "eager_s": statistics.median(e),
                            "tier0_s": statistics.median(j),
                            "ratio": statistics.median(j) / statistics.median(e)}
    out["tiers"] = _tiers(fns)
    return out
STALL_S = 60.0    # no eager kernel arrived for this long: report what is still pending


def _timed_ask(step, fns, t: float, steps: int, out: dict) -> None:
    """One step of the way to the final kernels; notes the first step that ran on compiled
    kernels with no eager or hand-written kernel, nor a row kernel's GIL-free pair
    (compiler/cpu/runtime/cshares.py), that it asked for still pending."""
    from tracejit.compiler.cpu.runtime import cshares
    from tracejit.compiler.cpu.kernels import vectorized
    asked = time.monotonic()
    _quiet_step(step, t, out)
    if "step_kernels_in_s" not in out and all(
            s in ("chunks", "compiled") for f in fns for s in f.cache_stats()["tiers"]) \
            and not vectorized.pending(asked) and not cshares.pending(asked):
        _note_kernels_in(out, t, steps + 1)


def _workers_cpu() -> float:
    """CPU seconds so far of the live compile workers (/proc: Linux)."""
    from bench.harness import process_cpu_s
    from tracejit.compiler import workers
    return sum((c for c in map(process_cpu_s, workers.worker_pids()) if c is not None), 0.0)


QUIET = 0.05   # a step is quiet when the workers used less than this share of its wall time


def _quiet_step(step, t: float, out: dict) -> None:
    """One step; notes ``quiet_s``, the end of the first step after every kernel the step
    asks for was in (``step_kernels_in_s``) during which no worker compiled (the workers'
    CPU under `QUIET` of the step's time): from then on the step runs at its full speed,
    which a compile on the other core costs (a cold Transformer step: 88 ms with a worker
    compiling, 48 ms without; tier21)."""
    w0, t0 = _workers_cpu(), time.perf_counter()
    step()
    dt = time.perf_counter() - t0
    if "step_kernels_in_s" in out and "quiet_s" not in out and _workers_cpu() - w0 < QUIET * dt:
        out["quiet_s"] = time.perf_counter() - t


def _until_workers_quiet(step, out: dict) -> None:
    """Step until every kernel the step asks for is in and a step was quiet (`_quiet_step`),
    for at most STALL_S."""
    since = time.perf_counter()
    while "quiet_s" not in out and time.perf_counter() - since < STALL_S:
        step()


def _note_kernels_in(out: dict, t: float, steps: int) -> None:
    if "step_kernels_in_s" not in out:
        out["step_kernels_in_s"] = time.perf_counter() - t
        out["steps_to_step_kernels_in"] = steps
        # the live workers' CPU by then (start-up included): with the wall time, their share
        # of a core while training ran (a worker losing its core to the program's own second
        # thread, or to other processes, shows here)
        out["workers_cpu_to_step_kernels_in_s"] = _workers_cpu()


def _until_eager_kernels_in(step, t: float, steps: int, asked: float) -> dict:
    """Step until no eager or hand-written kernel the compiled step asks for is pending
    (tracejit.compiler.cpu.kernels.vectorized.pending of the kernels asked for since the last step began;
    `asked`: the time.monotonic() before the steps just run); stops after STALL_S without
    progress and names what was left. A kernel an op asked for only in tier 0 (an op the
    compiled step does not run, a product's two halves the load turned off) is not waited
    for: the step's speed does not hang on it (and its loader starts only where the op ran
    again a second after its first call); those are named in ``kernels_not_asked``."""
    from tracejit.compiler.cpu.kernels import vectorized
    left, since = vectorized.pending(asked), time.perf_counter()
    while left and time.perf_counter() - since < STALL_S:
        asked = time.monotonic()
        step()
        steps += 1
        now = vectorized.pending(asked)
        if len(now) < len(left):
            since = time.perf_counter()
        left = now
    return {"kernels_in_s": time.perf_counter() - t, "steps_to_kernels_in": steps,
            "kernels_left": left,
            "kernels_not_asked": sorted(set(vectorized.pending()) - set(vectorized.pending(asked)))}


def _walls(step, n: int, out: dict | None = None, after=None) -> list:
    """`n` steps' wall times; `out` gets the CPU time they took: the calling thread's
    (``after_cpu_s``) and the whole process's (``after_proc_cpu_s``: a background
    process's loader threads too), figures the machine's load changes less than walls.
    `after()` runs after each step (not timed)."""
    ts = []
    c, pc = time.thread_time(), time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
        if after is not None:
            after()
    if out is not None:
        out["after_cpu_s"] = time.thread_time() - c
        out["after_proc_cpu_s"] = time.process_time() - pc
    return ts


def _time_captures() -> list:
    """Wrap capture (tracing, passes, guards) to time it: the list fills per capture."""
    from tracejit.jit.capture import Capture
    times, orig = [], Capture._capture

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return orig(self, *a, **k)
        finally:
            times.append(time.perf_counter() - t)
    Capture._capture = timed
    return times


def _median_step(step, n=5) -> float:
    ts = []
    for _ in range(n):
        t1 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t1)
    return sorted(ts)[n // 2]


def _kept(fns) -> list:
    """Per entry, the kernels it runs at the end: "chunks" or "parfor"/"serial" plans."""
    out = []
    for f in fns:
        for e in f.entries:
            specs = [s for p in _plans(e.executor) for k in p.kernels for s in k._specs.values()]
            out.append("chunks" if any(s.chunked for s in specs) else
                       "parfor" if any(s.parallel for s in specs) else "serial")
    return out


def _plans(ex) -> list:
    plans = [ex._infer] if getattr(ex, "_infer", None) else []
    for fwd, bwd, _ in getattr(ex, "_train", {}).values():
        plans += [p for p in (fwd, bwd) if p is not None]
    return plans


def _breakdown(fns) -> list:
    """Per kernel variant: numba's compile timers (seconds)."""
    rows = []
    for f in fns:
        for e in f.entries:
            for p in _plans(e.executor):
                for kern in p.kernels:
                    for (layouts, parallel), disp in kern.variants.items():
                        disp = getattr(disp, "unguarded", disp)
                        disp = getattr(disp, "kernel", disp)   # a row kernel's share form (RowShares)
                        for cres in getattr(disp, "overloads", {}).values():
                            timers = cres.metadata.get("timers", {}) if cres.metadata else {}
                            rows.append({"kernel": kern.label, "layouts": "/".join(layouts),
                                         "parallel": parallel,
                                         "compiler_lock_s": timers.get("compiler_lock", 0.0),
                                         "llvm_lock_s": timers.get("llvm_lock", 0.0)})
    return rows


WARM_CACHE = ""     # --warm-cache DIR: DIR/<step> holds a filled cache for warm_disk
FIRST_ONLY = False   # --first-only: the background_cold probe stops after its first step
def _run(step: str, name: str, cache: str, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TRACEJIT_CACHE_DIR=cache, TRACEJIT_COMPILE=mode,
               BENCH_MODE="eager" if name == "eager" else "jit", BENCH_STEP=step)
    if name == "tier0_ratio":   # one thread: OpenMP, OpenBLAS, MKL, numba
        env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                     "NUMBA_NUM_THREADS")})
    if not SOURCE_ONLY:
        if ROOT not in sys.path:   # (run as a script: bench/ is sys.path[0])
            sys.path.insert(0, ROOT)
        from bench import bytecode
        bytecode.compile_once()   # probes import compiled modules, as an installed package
    if FIRST_ONLY:
        env["BENCH_FIRST_ONLY"] = "1"
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "probe", name], env=env,
                       capture_output=True, text=True, timeout=1200)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _uptime() -> str:
    try:
        with open("/proc/loadavg") as f:
            return "load average " + " ".join(f.read().split()[:3])
    except OSError:
        return "load average unknown"


def run_step(step: str, probes: tuple) -> dict:
    try:
        return _run_step(step, probes)
    finally:   # the probes' private caches (a few MB each, one per probe and step)
        while _PRIVATE:
            shutil.rmtree(_PRIVATE.pop(), ignore_errors=True)


def _run_step(step: str, probes: tuple) -> dict:
    res = {"load_before": _uptime()}
    if "tier0_ratio" in probes:
        res["tier0_ratio"] = _run(step, "tier0_ratio", _private_dir(), "background")
    if "eager" in probes:
        eager_cache = _private_dir()
        if WARM_CACHE:   # its eager kernels (compiler/cpu/kernels/loader.py) load from disk, as the warm process's do
            shutil.copytree(os.path.join(WARM_CACHE, step), eager_cache, dirs_exist_ok=True)
        # (background: its eager kernels compile in workers while numpy runs, as a user's do)
        res["eager"] = _run(step, "eager", eager_cache, "background")
    if "sync_cold" in probes:
        res["sync_cold"] = _run(step, "sync_cold", _private_dir(), "sync")
    if "background_cold" in probes:
        res["background_cold"] = _run(step, "background_cold", _private_dir(), "background")
    if "background_wait" in probes:
        res["background_wait"] = _run(step, "background_wait", _private_dir(), "background")
    if "warm_disk" in probes:
        warm = _private_dir()
        if WARM_CACHE:   # --warm-cache: a copy of a filled cache (hints stay with the copy)
            shutil.copytree(os.path.join(WARM_CACHE, step), warm, dirs_exist_ok=True)
        else:            # a user's first run fills it (not a figure)
            res["fill"] = _run(step, "fill", warm, "background")
        # side by side, twice each, alternating: the load changes by the minute
        for k in (1, 2):
            res[f"warm_disk_background_{k}"] = _run(step, "warm_disk", warm, "background")
            res[f"warm_disk_sync_{k}"] = _run(step, "warm_disk", warm, "sync")
    res["load_after"] = _uptime()
    return res


_PRIVATE: list = []   # the private cache directories of the step being run


def _private_dir() -> str:
    d = tempfile.mkdtemp(prefix="bench-tiers-")
    os.chmod(d, 0o700)
    _PRIVATE.append(d)
    return d


def report(step: str, res: dict) -> None:
    how = "as the shell has it (--source-only)" if SOURCE_ONLY else "from compiled bytecode"
    print(f"\n== {step} ({res['load_before']} .. {res['load_after']}; "
          f"probes import tracejit {how})")
    r = res.get("tier0_ratio")
    if r:
        line = (f"tier 0 / eager, one thread, interleaved medians: {r['held']['ratio']:.3f} "
                f"({r['held']['tier0_s'] * 1e3:.3g} / {r['held']['eager_s'] * 1e3:.3g} ms, "
                f"{r['held']['pairs']} pairs, background work held)")
        c = r.get("compiling")
        if c:
            line += (f"; {c['ratio']:.3f} while it compiled ({c['tier0_s'] * 1e3:.3g} / "
                     f"{c['eager_s'] * 1e3:.3g} ms, {c['pairs']} pairs)")
        print(line + f"; first call {r['first_s'] * 1e3:.0f} ms (eager's {r['eager_first_s'] * 1e3:.0f})")
    e = res.get("eager")
    if e:
        print(f"eager step: first {e['first_s'] * 1e3:.0f} ms (caller CPU {e['first_cpu_s'] * 1e3:.0f}), "
              f"median {e['step_s'] * 1e3:.0f} ms")
    if "sync_cold" in res:
        k = res["sync_cold"]["kernels"]
        tot = sum(r["compiler_lock_s"] for r in k)
        llvm = sum(r["llvm_lock_s"] for r in k)
        npar = sum(1 for r in k if r["parallel"])
        par_s = sum(r["compiler_lock_s"] for r in k if r["parallel"])
        print(f"sync cold: first step {res['sync_cold']['first_s']:.2f} s; {len(k)} kernel variants "
              f"({npar} parallel: {par_s:.2f} s), {tot:.2f} s in numba ({llvm:.2f} s LLVM, "
              f"{tot - llvm:.2f} s typing+lowering)")
    b = res.get("background_cold")
    if b and "tier0_steps" not in b:   # --first-only
        ratio = f" ({b['first_s'] / e['step_s']:.1f}x the eager step)" if e else ""
        print(f"background cold: first step {b['first_s'] * 1e3:.0f} ms{ratio}")
        b = None
        print(f"  cold first step, parts: {_parts(res['background_cold'])}")
    if b:
        ratio = f" ({b['first_s'] / e['step_s']:.1f}x the eager step)" if e else ""
        print(f"background cold, training on: first step {b['first_s'] * 1e3:.0f} ms{ratio}; "
              f"compiled kernels ({b['kept']}) after {b['full_speed_s']:.1f} s "
              f"({b['tier0_steps']} tier-0 steps; its first compiled steps "
              f"{b['final_step_s'] * 1e3:.3g} ms); every eager and hand-written kernel in after "
              f"{b['kernels_in_s']:.1f} s ({b['steps_to_kernels_in']} steps; on compiled kernels with "
              f"every kernel it asks for in after {b.get('step_kernels_in_s', float('nan')):.1f} s)"
              + (f", still pending: {', '.join(b['kernels_left'])}" if b['kernels_left'] else "")
              + (f" (asked for before but not by the compiled step, not waited for: {', '.join(b['kernels_not_asked'])})"
                 if b.get('kernels_not_asked') else "")
              + f"; no worker compiling after {b.get('quiet_s', float('nan')):.1f} s"
              + f"; compiled step {b['steady_step_s'] * 1e3:.3g} ms" + _policy(b))
    if "background_wait" in res:
        w = res["background_wait"]
        print(f"background cold, caller waiting (tj.compiler.wait()): every kernel in after "
              f"{w['all_in_s']:.1f} s; kept {w['kept']}, compiled step {w['steady_step_s'] * 1e3:.0f} ms")
    if "fill" in res:
        print(f"background mode, empty cache, then tj.compiler.wait() (filling the warm-disk cache): "
              f"first step {res['fill']['first_s']:.2f} s")
    if "warm_disk_background_1" in res:
        bg = [res[f"warm_disk_background_{k}"]["first_s"] * 1e3 for k in (1, 2)]
        sy = [res[f"warm_disk_sync_{k}"]["first_s"] * 1e3 for k in (1, 2)]
        print(f"warm disk first step: background {bg[0]:.0f} / {bg[1]:.0f} ms, "
              f"sync {sy[0]:.0f} / {sy[1]:.0f} ms")
        print("  background first step, parts: " + "; ".join(
            _parts(res[f"warm_disk_background_{k}"]) for k in (1, 2)))
        if e:
            print(f"  warm first step / eager first step: {bg[0] / (e['first_s'] * 1e3):.2f} / "
                  f"{bg[1] / (e['first_s'] * 1e3):.2f}; / eager median step: "
                  f"{bg[0] / (e['step_s'] * 1e3):.1f} / {bg[1] / (e['step_s'] * 1e3):.1f}")
        for k in (1, 2):
            tb = res[f"warm_disk_background_{k}"].get("tiers_by_step")
            if tb:
                first = next((n + 1 for n, t in enumerate(tb) if "tier0" not in t.split(",")), None)
                print(f"  background process {k}: tiers after steps 1..{len(tb)}: {' '.join(tb)}"
                      f" (every entry compiled from step {first})")
        later = [sum(res[f"warm_disk_background_{k}"]["steps_after_s"]) * 1e3 for k in (1, 2)]
        n = len(res["warm_disk_background_1"]["steps_after_s"])
        ref = f"; eager {sum(e['steps_after_s']) * 1e3:.0f} ms" if e and "steps_after_s" in e else ""
        print(f"  steps 2..{n + 1} of the warm background process, wall in all: "
              f"{later[0]:.0f} / {later[1]:.0f} ms{ref}")
        cpu = [(res[f"warm_disk_background_{k}"].get("after_cpu_s"),
                res[f"warm_disk_background_{k}"].get("after_proc_cpu_s")) for k in (1, 2)]
        if all(a is not None for a, _ in cpu):
            eref = (f"; eager {e['after_cpu_s'] * 1e3:.0f} / {e['after_proc_cpu_s'] * 1e3:.0f} ms"
                    if e and "after_cpu_s" in e else "")
            print(f"  the same steps' CPU, calling thread / whole process: "
                  f"{cpu[0][0] * 1e3:.0f} / {cpu[0][1] * 1e3:.0f} and {cpu[1][0] * 1e3:.0f} / "
                  f"{cpu[1][1] * 1e3:.0f} ms{eref}")
        if e and "steps_after_s" in e:
            # The eager process pays numba's import and its eager kernels' loads in its
            # first step; the background process moves them to its later steps' threads.
            total = [res[f"warm_disk_background_{k}"]["first_s"] * 1e3 + later[k - 1] for k in (1, 2)]
            print(f"  steps 1..{n + 1} in all, wall: background {total[0]:.0f} / {total[1]:.0f} ms, "
                  f"eager {(e['first_s'] + sum(e['steps_after_s'])) * 1e3:.0f} ms")
    if b and b.get("workers_cpu_to_step_kernels_in_s") is not None:
        w, kin = b["workers_cpu_to_step_kernels_in_s"], b["step_kernels_in_s"]
        print(f"  compile workers until every kernel the step asks for was in: {w:.2f} s of CPU "
              f"in {kin:.2f} s ({w / kin:.2f} of a core)")
    if b:
        print(f"  cold first step, parts: {_parts(b)}")


def _policy(r: dict) -> str:
    """The thread policy's count at a probe's steady step and what it read (compiler/cpu/runtime/coreshare.py)."""
    p = r.get("policy")
    if not p:
        return ""
    return (f" on {p['threads']} thread{'s' if p['threads'] != 1 else ''} (others {p['others']:.2f} "
            f"cores; trials of the full count {p['trials']}, kept {p['kept']})")


def _parts(r: dict) -> str:
    """A first step's parts (ms): its caller's CPU time, capture, the tier-0 forward."""
    tier0 = f", tier-0 forward {r['tier0_fwd_s'] * 1e3:.0f}" if "tier0_fwd_s" in r else ""
    return (f"wall {r['first_s'] * 1e3:.0f}, caller CPU {r['first_cpu_s'] * 1e3:.0f}, capture "
            f"{r['capture_s'] * 1e3:.0f}{tier0}")


def main(argv=None) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python bench/bench_tiers.py")
    ap.add_argument("--step", default="mlp", help=f"comma-separated, of {', '.join(STEPS)}")
    ap.add_argument("--probes", default=",".join(PROBES), help=f"comma-separated, of {', '.join(PROBES)}")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--first-only", action="store_true",
                    help="background_cold: time the first step only (not the way to full speed)")
    ap.add_argument("--warm-cache", metavar="DIR",
                    help="warm_disk: copy DIR/<step> (a filled cache) instead of filling one")
    ap.add_argument("--source-only", action="store_true",
                    help="do not compile tracejit's bytecode first: probes import it as the "
                         "shell has it (from source where no bytecode was ever written)")
    args = ap.parse_args(argv)
    global FIRST_ONLY, WARM_CACHE, SOURCE_ONLY
    FIRST_ONLY, WARM_CACHE, SOURCE_ONLY = args.first_only, args.warm_cache or "", args.source_only
    steps = [s for s in args.step.split(",") if s]
    probes = tuple(p for p in args.probes.split(",") if p)
    bad = [s for s in steps if s not in STEPS] + [p for p in probes if p not in PROBES]
    if bad:
        ap.error(f"unknown step or probe: {', '.join(bad)}")
    _main(steps, probes, args.json)


SOURCE_ONLY = False  # --source-only: no bytecode compiled first (bench/bytecode.py)


def _main(steps: list, probes: tuple, json_path) -> None:
    allres = {}
    for step in steps:
        allres[step] = run_step(step, probes)
        report(step, allres[step])
    if json_path:
        with open(json_path, "w") as f:
            json.dump(allres, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "probe":
        sys.path.insert(0, ROOT)
        print(json.dumps(probe(sys.argv[2])))
    else:
        main()
