"""Where the time of tracejit's MLP training step goes: GEMM, fused kernels, the rest.

    python -m bench.breakdown [--quick] [--eager] [--steps N] [--json FILE]

The step is the ``mlp`` workload's (batch 256, 784->1024->1024->10, LayerNorm + GELU,
cross-entropy, Adam; the same model code and weights as ``python -m bench``), run by phase:
forward (the compiled module), loss, backward, optimizer step, zero_grad. While it runs,
the compiled plans' calls are timed one by one: every matrix product (GEMM: shape, operand
layouts, seconds), every fused kernel, every non-fused primitive. What a phase spends
outside those calls is Python: the plan's own lines, guards, autograd, allocation.

The GEMMs are then replayed in the same process, one shape at a time with the same
operand layouts and on the BLAS threads each had in the step, to give their isolated rate
(with warm caches, and with the caches flushed before each call, as the rest of a step
leaves them), and an sgemm of the reference shape (256x1024 @ 1024x1024) is timed the same way on
BLAS's full thread count: "GEMM share" is the step's GEMM rate over the best isolated sgemm
rate measured here on all threads (the fastest call of any of these shapes alone). That
divides the median step's GEMM time by a best call; a second line gives the share with one
statistic on both sides (the step's fastest calls against the best; the step's medians
against the best shape's median alone) and the headline's ceiling for the step's mix of
shapes (every product at its own best alone). Where tracejit's load policy (tracejit/compiler/cpu/runtime/coreshare.py) ran
products on fewer threads because other processes held a core, the table's threads column
and a line say so: such a step cannot reach the all-threads rate, and the first thing to
read is that count, not the GEMMs. ``python -m bench`` adds the rate of a fresh
process that has loaded nothing but numpy (``machine.sgemm``), the ceiling for the
process.

Timing the calls one by one costs about a microsecond per call (some 60 per step) and
keeps the work in the same order; the phase totals are reported from separate,
uninstrumented steps. How the calls are found: the plans are the objects of class
``Plan`` reachable from the garbage collector, each a generated function whose globals
hold ``xp`` (the array module), ``MATMUL`` (the backend's matmul), ``K<n>[p|s]`` (kernels) and ``I_<op>`` (primitive
implementations); they are swapped for timing wrappers during the instrumented steps
and put back afterwards. If the compiler's layout changes, the breakdown says it found
no plans instead of failing.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from typing import Callable, Iterator

import numpy as np

REF_SHAPE = (256, 1024, 1024)   # m, k, n of the reference sgemm (the MLP's hidden layer)
PHASES = ("forward", "loss", "backward", "optimizer", "zero_grad")
_KERNEL = re.compile(r"K\d+[ps]?$")


# ---------------------------------------------------------------- GEMM rates
def gemm_flops(m: int, k: int, n: int) -> float:
    return 2.0 * m * k * n


def _layout(a: np.ndarray) -> str:
    """'C' (row-major), 'F' (a transposed row-major array: BLAS takes it with trans) or
    'S' (other strides: numpy copies it before calling BLAS)."""
    if a.flags.c_contiguous:
        return "C"
    if a.flags.f_contiguous:
        return "F"
    return "S"


def _operand(shape: tuple, layout: str, rng) -> np.ndarray:
    if layout == "F":
        return np.ascontiguousarray(rng.standard_normal(shape[::-1], dtype=np.float32)).T
    a = rng.standard_normal(shape, dtype=np.float32)
    if layout == "S":
        big = np.empty((shape[0], shape[1] * 2), np.float32)
        big[:, ::2] = a
        return big[:, ::2]
    return a


FLUSH_BYTES = 64 << 20   # written before a "cold" GEMM: more than the caches hold


@contextlib.contextmanager
def blas_threads_set(n: int | None) -> Iterator[None]:
    """numpy's BLAS on `n` threads inside the block (None: as it is), the count back after."""
    if n is None:   # (nothing imported: machine.sgemm's process must load only numpy)
        yield
        return
    try:
        from tracejit.threads import blas_threads_set as _set
    except ImportError:
        yield
        return
    with _set(n):
        yield


def full_blas_threads() -> int | None:
    """BLAS's count before tracejit's load policy lowered it (coreshare.blas_ceiling)."""
    try:
        from tracejit.compiler.cpu.runtime.coreshare import blas_ceiling
    except ImportError:
        return None
    return blas_ceiling()


def sgemm_seconds(m: int, k: int, n: int, layouts: str = "CC", repeat: int = 15,
                  min_time: float = 0.2, cold: bool = False, threads: int | None = None) -> float:
    """Best seconds of ``np.matmul`` of (m, k) @ (k, n) float32 with the given operand
    layouts, into a preallocated output (no allocation timed). ``cold``: the caches are
    flushed (FLUSH_BYTES written) before each timed call, as in a training step, whose
    other products, kernels and optimizer pass come between two uses of a weight (the MLP
    step's weights and activations alone outgrow a 2 MB L2: its GEMMs took the same time
    with the optimizer left out)
    ``threads``: BLAS's thread count for the calls (None: as it is now)."""
    return sgemm_times(m, k, n, layouts, repeat, min_time, cold, threads)[0]


def sgemm_times(m: int, k: int, n: int, layouts: str = "CC", repeat: int = 15,
                min_time: float = 0.2, cold: bool = False,
                threads: int | None = None) -> tuple[float, float]:
    """(best, median) seconds of the calls `sgemm_seconds` times: the median is what a
    step's median compares with like for like (on a shared or virtual machine the best of
    some hundred back-to-back calls runs 10-20% ahead of their median)."""
    with blas_threads_set(threads):
        return _sgemm_seconds(m, k, n, layouts, repeat, min_time, cold)


def _sgemm_seconds(m, k, n, layouts, repeat, min_time, cold) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    a, b = _operand((m, k), layouts[0], rng), _operand((k, n), layouts[1], rng)
    out = np.empty((m, n), np.float32)
    flush = np.empty(FLUSH_BYTES // 4, np.float32) if cold else None
    np.matmul(a, b, out=out)
    times: list = []
    spent = 0.0
    while len(times) < repeat or (spent < min_time and len(times) < 50 * repeat and not cold):
        if flush is not None:
            flush.fill(len(times))
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
    return min(times), statistics.median(times)


def sgemm_rate(m: int = REF_SHAPE[0], k: int = REF_SHAPE[1], n: int = REF_SHAPE[2],
               repeat: int = 15, threads: int | None = None) -> dict:
    """The reference sgemm's best rate in this process (GFLOP/s) on `threads` BLAS threads
    (None: the count BLAS has now)."""
    s, med = sgemm_times(m, k, n, "CC", repeat, threads=threads)
    return {"shape": [m, k, n], "best_ms": s * 1e3, "gflops": gemm_flops(m, k, n) / s / 1e9,
            "median_ms": med * 1e3, "median_gflops": gemm_flops(m, k, n) / med / 1e9,
            "threads": threads}


# ---------------------------------------------------------------- call timers
class Timers:
    """Seconds and call counts per category, and every GEMM's shape and time."""

    def __init__(self):
        self.seconds: dict = defaultdict(float)
        self.calls: dict = defaultdict(int)
        self.gemms: list = []
        # fused kernel label -> [seconds, calls, bytes of its array arguments]
        self.kernels: dict = defaultdict(lambda: [0.0, 0, 0])

    def kernel(self, label: str, fn: Callable) -> Callable:
        """`fn` (a fused kernel) timed under "kernels" and recorded under `label` with the
        bytes of its array arguments (what it reads and writes, at the least)."""
        timed = self.timed("kernels", fn)
        kernels = self.kernels

        def call(*args):
            t0 = time.perf_counter()
            try:
                return timed(*args)
            finally:
                # The record is made at the first call, not here: every plan still in
                # memory is wrapped (dead ones the garbage collector has not freed yet
                # too), and only kernels that ran belong in the table.
                rec = kernels[label]
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                rec[2] += sum(a.nbytes for a in args if isinstance(a, np.ndarray))
        return call

    def timed(self, category: str, fn: Callable) -> Callable:
        seconds, calls = self.seconds, self.calls

        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[category] += time.perf_counter() - t0
                calls[category] += 1
        return call

    def matmul(self, fn: Callable, policy: bool = False) -> Callable:
        """`fn` (a matmul) timed under "gemm"; each 2-D product is recorded as (m, k, n,
        layouts, seconds, BLAS threads). ``policy``: `fn` is blas_gemm.matmul, which may run
        a product on fewer threads than BLAS's count (read after the call, outside the time)."""
        count = _policy_threads if policy else _blas_count

        def call(a, b, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(a, b, *args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                self.seconds["gemm"] += dt
                self.calls["gemm"] += 1
                if getattr(a, "ndim", 0) == 2 and getattr(b, "ndim", 0) == 2:
                    m, k, n = a.shape[0], a.shape[1], b.shape[1]
                    self.gemms.append((m, k, n, _layout(a) + _layout(b), dt, count(m, k, n)))
        return call


def _bias_gemm(timers: Timers, fn: Callable) -> Callable:
    """epilogue.py's ``matmul_bias(xp, x, w, b)`` timed and recorded as the GEMM it is
    ((rows of x) x k x n)."""
    timed = timers.matmul(lambda x2, w, xp, x, b: fn(xp, x, w, b), policy=True)

    def call(xp, x, w, b):
        return timed(x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x, w, xp._xp if type(xp) is _ArrayModule else xp, x, b)
    return call


def _blas_count(m: int, k: int, n: int) -> int | None:
    try:
        from tracejit.threads import blas_threads
    except ImportError:
        return None
    return blas_threads()


def _policy_threads(m: int, k: int, n: int) -> int | None:
    try:
        from tracejit.compiler.cpu.gemm.blas_gemm import gemm_thread_count
    except ImportError:
        return _blas_count(m, k, n)
    return gemm_thread_count(m, k, n)


class _ArrayModule:
    """Stands in for ``xp`` in a plan: its matmul is timed, the rest passes through."""

    def __init__(self, xp, timers: Timers):
        self._xp = xp
        self.matmul = timers.matmul(xp.matmul)

    def __getattr__(self, name):
        return getattr(self._xp, name)


class _KernelFamily:
    """Stands in for a kernel family (``K<n>``, whose ``get`` picks a variant)."""

    def __init__(self, family, timers: Timers):
        self._family, self._timers = family, timers

    def get(self, *args, **kwargs):
        return self._timers.kernel(self._family.label, self._family.get(*args, **kwargs))

    def ready(self, *args, **kwargs):
        # plans ask `ready` for a strided operand's variant (None: not loaded yet)
        fn = self._family.ready(*args, **kwargs)
        return None if fn is None else self._timers.kernel(self._family.label, fn)

    def __getattr__(self, name):
        return getattr(self._family, name)


def _real_xp(impl: Callable) -> Callable:
    """An op impl called as ``impl(xp, ...)`` given the array module itself, not the
    `_ArrayModule` standing in for it: impls with hand-written kernels check ``xp is numpy``
    (compiler/cpu/kernels/loader.py) and would time their numpy forms instead (LayerNorm's row kernels:
    10.6 ms of "other primitives" per MLP step instead of ~3)."""
    def call(xp, *args, **kwargs):
        return impl(xp._xp if type(xp) is _ArrayModule else xp, *args, **kwargs)
    return call


def _plans() -> list:
    try:
        from tracejit.compiler.plan import Plan
    except ImportError:
        return []
    # type(), not isinstance: isinstance reads __class__, which some proxies among all the
    # process's objects answer with a warning or a side effect
    return [o for o in gc.get_objects() if issubclass(type(o), Plan) and hasattr(o, "fn")]


@contextlib.contextmanager
def instrumented(timers: Timers) -> Iterator[int]:
    """Time the calls of every compiled CPU plan in the process; yields how many plans."""
    from tracejit.compiler.plan import PRODUCT_NAME, SIGNATURE_CALL
    saved = []
    plans = _plans()
    try:
        for plan in plans:
            g = getattr(plan.fn, "__globals__", None)
            if g is None or getattr(plan.backend, "name", plan.backend) != "cpu":
                continue
            for name, value in list(g.items()):
                if name == "xp":
                    new = _ArrayModule(value, timers)
                elif PRODUCT_NAME.match(name):  # the backend's matmul (blas_gemm.matmul on CPU)
                    # or one product's own callable (plan.py's MATMUL_<n>)
                    new = timers.matmul(value, policy=True)
                elif _KERNEL.match(name) and hasattr(value, "get"):
                    new = _KernelFamily(value, timers)
                elif _KERNEL.match(name) and callable(value):
                    family = g.get(name.rstrip("ps"))
                    new = timers.kernel(getattr(family, "label", name), value)
                elif name == "I_matmul_bias":    # compiler/gemm_steps: x @ w + b as one GEMM
                    new = _bias_gemm(timers, value)
                elif name.startswith("I_") and callable(value):
                    new = timers.timed("other ops", _real_xp(value))
                elif SIGNATURE_CALL.match(name) and callable(value):
                    new = timers.timed("other ops", value)
                else:
                    continue
                saved.append((g, name, value))
                g[name] = new
        yield len(plans)
    finally:
        for g, name, value in reversed(saved):
            g[name] = value


# ---------------------------------------------------------------- the step
def _mlp_step(compiled: bool):
    """The bench's MLP step, split into phases: returns ({phase: fn}, loss())."""
    os.environ.setdefault("TRACEJIT_COMPILE", "sync")   # as in bench/impls/tracejit_impl.py
    import tracejit as tj

    from . import workloads as W
    from .impls import torchlike
    data = W.mlp_data()
    model = torchlike.make_mlp(tj)
    torchlike.load_mlp(tj, model, data, lambda a: tj.tensor(np.array(a)))
    fwd = tj.script(model) if compiled else model
    opt = tj.optim.Adam(model.parameters(), lr=W.MLP_LR)
    x, labels = tj.tensor(np.array(data["x"])), tj.tensor(np.array(data["labels"]))
    st: dict = {}

    def forward():
        st["out"] = fwd(x)

    def loss():
        st["loss"] = tj.nn.functional.cross_entropy(st.pop("out"), labels)

    def backward():
        st["loss"].backward()

    def optimizer():
        opt.step()

    def zero_grad():
        opt.zero_grad()

    phases = dict(zip(PHASES, (forward, loss, backward, optimizer, zero_grad)))
    return phases, lambda: float(st["loss"].item())


def _run_steps(phases: dict, steps: int) -> dict:
    """Per phase, the seconds of each of `steps` steps."""
    times: dict = {p: [] for p in phases}
    for _ in range(steps):
        for p, fn in phases.items():
            t0 = time.perf_counter()
            fn()
            times[p].append(time.perf_counter() - t0)
    return times


def _gemm_table(gemms: list, steps: int, repeat: int, full: int | None = None) -> list:
    """One row per distinct GEMM of the step (shape, layouts, BLAS threads it ran on): calls
    per step, median seconds in the step, best seconds replayed alone in this process on the
    same threads (warm and cold caches) and, where that was fewer than `full`, on `full`."""
    by_key: dict = defaultdict(list)
    for m, k, n, lay, dt, threads, *paired in gemms:
        by_key[(m, k, n, lay, threads, bool(paired and paired[0]))].append(dt)
    rows = []
    for (m, k, n, lay, threads, paired), ts in sorted(
            by_key.items(), key=lambda kv: (-gemm_flops(*kv[0][:3]), kv[0][3:])):
        lay_alone = lay.replace("S", "C")
        alone, alone_med = sgemm_times(m, k, n, lay_alone, repeat, threads=threads)
        cold = sgemm_seconds(m, k, n, lay_alone, max(3, repeat // 3), cold=True, threads=threads)
        fewer = full is not None and threads is not None and threads < full
        alone_full, alone_full_med = (sgemm_times(m, k, n, lay_alone, repeat, threads=full) if fewer
                                      else (alone, alone_med))
        step_s = statistics.median(ts)
        flop = gemm_flops(m, k, n)
        rows.append({"m": m, "k": k, "n": n, "layouts": lay, "threads": threads, "paired": paired,
                     "per_step": len(ts) / steps,
                     "step_ms": step_s * 1e3, "step_min_ms": min(ts) * 1e3,
                     "alone_ms": alone * 1e3, "alone_median_ms": alone_med * 1e3, "cold_ms": cold * 1e3,
                     "alone_full_ms": alone_full * 1e3,
                     "step_gflops": flop / step_s / 1e9, "alone_gflops": flop / alone / 1e9,
                     "alone_full_gflops": flop / alone_full / 1e9,
                     "alone_full_median_gflops": flop / alone_full_med / 1e9})
    return rows


def mlp_breakdown(steps: int = 20, warmup: int = 5, compiled: bool = True,
                  sgemm_repeat: int = 15) -> dict:
    """Measure the MLP step by phase and by kind of call (see the module docstring)."""
    phases, last_loss = _mlp_step(compiled)
    _run_steps(phases, warmup)
    faults0 = _minor_faults()
    work0 = _kernel_work()
    plain, others_plain = _others_cores(lambda: _run_steps(phases, steps))
    work1 = _kernel_work()
    faults = (_minor_faults() - faults0) / steps if faults0 is not None else None
    timers = Timers()
    gemm_steps = []     # each instrumented step's GEMM seconds

    def instrumented_steps():
        with instrumented(timers) as n_plans:
            inst: dict = {p: [] for p in phases}
            for _ in range(steps):
                before = timers.seconds["gemm"]
                for p, ts in _run_steps(phases, 1).items():
                    inst[p] += ts
                gemm_steps.append(timers.seconds["gemm"] - before)
        return inst, n_plans
    (inst, n_plans), others_inst = _others_cores(instrumented_steps)
    work2 = _kernel_work()
    step_plain = [sum(ts) for ts in zip(*plain.values())]
    step_inst = [sum(ts) for ts in zip(*inst.values())]
    res: dict = {"compiled": compiled, "steps": steps, "plans_found": n_plans,
                 "step_ms": statistics.median(step_plain) * 1e3,
                 "step_instrumented_ms": statistics.median(step_inst) * 1e3,
                 "phases_ms": {p: statistics.median(v) * 1e3 for p, v in plain.items()},
                 "final_loss": last_loss(),
                 # fresh pages the allocator had to map: each costs a fault and zeroing
                 "page_faults_per_step": faults,
                 # cores other processes kept busy during the plain and the instrumented steps
                 "others_cores_steps": [None if o is None else round(o, 2)
                                        for o in (others_plain, others_inst)],
                 # kernel modules loaded from disk or compiled during them (not the steady step)
                 "kernel_work_steps": [work1 - work0, work2 - work1]}
    per_step = {c: s / steps * 1e3 for c, s in timers.seconds.items()}
    res["calls_ms"] = per_step
    res["calls_per_step"] = {c: n / steps for c, n in timers.calls.items()}
    inside = sum(per_step.values())
    plan_phases = statistics.median(
        [a + b for a, b in zip(inst["forward"], inst["backward"])]) * 1e3
    # What forward and backward spend outside GEMMs, kernels and primitive calls: the
    # plans' Python lines, guards, autograd, allocation, the timers' own cost.
    res["python_ms"] = max(plan_phases - inside, 0.0)
    # The yardstick runs on BLAS's full count: where the load policy gave a core away
    # (coreshare), the step's products ran on fewer threads, and the table says so.
    full = full_blas_threads()
    gemms = _gemm_table(timers.gemms, steps, sgemm_repeat, full)
    res["gemms"] = gemms
    flops = sum(gemm_flops(r["m"], r["k"], r["n"]) * r["per_step"] for r in gemms)
    ref = sgemm_rate(repeat=sgemm_repeat, threads=full)
    best = max([ref["gflops"]] + [r["alone_full_gflops"] for r in gemms])
    res["gemm_fewer_threads_per_step"] = sum(
        r["per_step"] for r in gemms if full and r["threads"] is not None and r["threads"] < full)
    res["gemm_gflop_per_step"] = flops / 1e9
    # The step's GEMM time is its median over the steps, as every other figure here: a mean
    # takes in the steps another process stalled (one run at load 5: mean 10.58 ms, median
    # 9.40), the yardstick stays the best call
    res["gemm_mean_ms"] = per_step.get("gemm", 0.0)
    gemm_ms = statistics.median(gemm_steps) * 1e3 if gemm_steps else 0.0
    res["gemm_median_ms"] = gemm_ms
    res["gemm_gflops"] = flops / (gemm_ms / 1e3) / 1e9 if gemm_ms else None
    res["gemm_alone_ms"] = sum(r["alone_ms"] * r["per_step"] for r in gemms)
    res["gemm_cold_ms"] = sum(r["cold_ms"] * r["per_step"] for r in gemms)
    res["sgemm_ref"] = ref
    res["sgemm_best_gflops"] = best
    res["gemm_share_of_best"] = res["gemm_gflops"] / best if res["gemm_gflops"] else None
    # the same products alone on the threads they had in the step: what the step itself costs them
    res["gemm_share_of_alone"] = res["gemm_alone_ms"] / gemm_ms if gemm_ms else None
    res.update(_like_for_like(gemms, flops, ref, best))
    res["threads"] = thread_settings()
    res["kernels"] = _kernel_table(timers.kernels, steps)
    res["kernel_mb_per_step"] = sum(r["mb"] for r in res["kernels"])
    res["store_bandwidth"] = _store_bandwidth()
    return res


def _like_for_like(gemms: list, flops: float, ref: dict, best: float) -> dict:
    """The GEMM share with one statistic on both sides. The headline share divides the
    median step's GEMM time by the yardstick's *best* call, the fastest of some hundred warm
    back-to-back calls of the most BLAS-friendly shape: a rate the step's calls can only
    match at their own best. Beside it: the step's GEMMs at their fastest call of the steps
    (best against best), at their medians against the best shape's median alone (median
    against median), and the ceiling of the headline for this mix of shapes (every product
    at its own best alone)."""
    if not gemms:
        return {}
    at_min = sum(r.get("step_min_ms", r["step_ms"]) * r["per_step"] for r in gemms)
    at_median = sum(r["step_ms"] * r["per_step"] for r in gemms)
    alone_best = sum(r["alone_full_ms"] * r["per_step"] for r in gemms)
    best_median = max([ref.get("median_gflops", 0.0)]
                      + [r.get("alone_full_median_gflops", 0.0) for r in gemms])

    def share(ms: float, yard: float) -> float | None:
        return flops / (ms / 1e3) / 1e9 / yard if ms and yard else None
    return {"gemm_step_min_ms": at_min, "gemm_step_median_ms": at_median,
            "sgemm_best_median_gflops": best_median,
            "gemm_share_best_vs_best": share(at_min, best),
            "gemm_share_median_vs_median": share(at_median, best_median),
            "gemm_share_ceiling": share(alone_best, best)}


def _kernel_table(kernels: dict, steps: int) -> list:
    """One row per fused kernel: calls, ms and MB (its array arguments) per step, GB/s."""
    rows = [{"label": label, "per_step": calls / steps, "ms": sec / steps * 1e3, "mb": nbytes / steps / 1e6,
             "gbps": nbytes / sec / 1e9 if sec else 0.0}
            for label, (sec, calls, nbytes) in kernels.items()]
    return sorted(rows, key=lambda r: -r["ms"])


def _store_bandwidth() -> dict:
    """The machine's copy and computed-store rates, in this process (bench/machine.py):
    what the kernels' GB/s compare with."""
    try:
        from .machine import bandwidth
        return bandwidth(repeat=5)
    except Exception as exc:   # a yardstick must not fail the breakdown
        return {"error": f"{type(exc).__name__}: {exc}"}


def _cpu_readings() -> tuple[float, float] | None:
    """(CPU seconds the whole machine spent busy since boot, this process's CPU seconds), as
    tracejit's load policy reads them (coreshare), or None where there is no /proc/stat."""
    from tracejit.compiler.cpu.runtime import coreshare
    busy = coreshare._busy_seconds()
    return None if busy is None else (busy, coreshare._own_seconds())


def _others_cores(run) -> tuple:
    """``run()``'s result and the cores other processes kept busy meanwhile (None where
    unknown). Why: a step whose threads split its products and kernels over both cores waits
    for a core another process holds, and with tracejit's load policy off (or before it
    samples) such steps run 4-8x slower on 2 cores. The figure beside the step time says so."""
    r0, t0 = _cpu_readings(), time.perf_counter()
    out = run()
    r1, wall = _cpu_readings(), time.perf_counter() - t0
    if r0 is None or r1 is None or wall <= 0:
        return out, None
    return out, max(0.0, ((r1[0] - r0[0]) - (r1[1] - r0[1])) / wall)


def _kernel_work() -> int:
    """Kernel modules this process has loaded from disk or compiled so far (a load from
    memory is free): the breakdown's steps should add none: with this count a compile or a
    load inside them shows, and where it reads 0 a slow step is the load's, `others_cores_steps`."""
    from tracejit.compiler import diskcache
    stats = diskcache.stats()
    return stats["disk_hits"] + stats["compiles"]


def _minor_faults() -> int | None:
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def thread_settings() -> dict:
    """The thread counts and wait policies that decide how BLAS and numba share cores."""
    out = {"cpus": os.cpu_count()}
    for var in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER"):
        if os.environ.get(var) is not None:
            out[var] = os.environ[var]
    try:
        from tracejit.threads import blas_threads
        out["blas_threads"] = blas_threads()
    except ImportError:
        pass
    try:
        from tracejit.compiler.cpu.runtime import coreshare
        if coreshare.ENABLED:
            # cores other processes kept busy at the last sample: from more than SLACK of one,
            # products and kernels run on one thread fewer
            out["others_cores"] = round(coreshare.core_share.others, 2)
        else:
            out["adaptive"] = "off"
    except ImportError:
        pass
    if "numba" in sys.modules:
        import numba
        out["numba_threads"] = numba.get_num_threads()
        try:
            out["numba_layer"] = numba.threading_layer()
        except ValueError:      # no parallel kernel has run yet
            out["numba_layer"] = None
    return out


# ---------------------------------------------------------------- text
def render(res: dict, machine_sgemm: dict | None = None) -> str:
    """The breakdown as Markdown (a few lines and a GEMM table)."""
    if "error" in res or "skipped" in res:
        return f"MLP step breakdown: {res.get('error') or res.get('skipped')}"
    mode = "compiled (tj.script)" if res["compiled"] else "eager"
    lines = [f"MLP step breakdown, tracejit {mode}: {res['step_ms']:.2f} ms per step "
             f"(median of {res['steps']}; {res['step_instrumented_ms']:.2f} ms with every call timed)"]
    ph = res["phases_ms"]
    faults = res.get("page_faults_per_step")
    lines.append("- phases: " + ", ".join(f"{p} {ph[p]:.2f}" for p in PHASES if p in ph) + " ms"
                 + (f"; {faults:.0f} page faults per step" if faults is not None else ""))
    if not res["plans_found"]:
        lines.append("- no compiled plans found: no per-call breakdown")
        return "\n".join(lines)
    c, n = res["calls_ms"], res["calls_per_step"]
    parts = [f"GEMM {c.get('gemm', 0):.2f} ms ({n.get('gemm', 0):.0f} calls)",
             f"fused kernels {c.get('kernels', 0):.2f} ms ({n.get('kernels', 0):.0f})",
             f"other primitives {c.get('other ops', 0):.2f} ms ({n.get('other ops', 0):.0f})",
             f"Python/plan/autograd {res['python_ms']:.2f} ms",
             f"optimizer {ph.get('optimizer', 0):.2f} ms", f"loss {ph.get('loss', 0):.2f} ms"]
    lines.append("- forward + backward: " + "; ".join(parts[:4]) + "; outside them: " + "; ".join(parts[4:]))
    ref = res["sgemm_ref"]
    share = res.get("gemm_share_of_best")
    on = f" on {ref['threads']} threads" if ref.get("threads") else ""
    spread = (f" (median step: {res['gemm_median_ms']:.2f} ms of GEMM; mean {res['gemm_mean_ms']:.2f})"
              if "gemm_median_ms" in res else "")
    lines.append(f"- GEMM: {res['gemm_gflop_per_step']:.2f} GFLOP per step at "
                 f"{res['gemm_gflops'] or 0:.0f} GFLOP/s{spread} = {share or 0:.0%} of the best sgemm rate "
                 f"measured in this process{on} ({res['sgemm_best_gflops']:.0f} GFLOP/s; reference "
                 f"{'x'.join(map(str, ref['shape']))}: {ref['gflops']:.0f}); the same GEMMs alone: "
                 f"{res['gemm_alone_ms']:.2f} ms, {res.get('gemm_cold_ms', float('nan')):.2f} ms "
                 f"with cold caches" + (f" ({res['gemm_share_of_alone']:.0%} of the step's GEMM time)"
                                         if res.get("gemm_share_of_alone") else ""))
    if res.get("gemm_share_median_vs_median") is not None:
        lines.append(f"- GEMM share like for like: the step's GEMMs at their fastest call "
                     f"{res['gemm_step_min_ms']:.2f} ms = {res['gemm_share_best_vs_best']:.0%} of the best "
                     f"rate (best against best); at their medians {res['gemm_step_median_ms']:.2f} ms = "
                     f"{res['gemm_share_median_vs_median']:.0%} of the best median rate alone "
                     f"({res['sgemm_best_median_gflops']:.0f} GFLOP/s; median against median); every "
                     f"product at its own best alone would give {res['gemm_share_ceiling']:.0%} of the "
                     f"best rate (the headline's ceiling for this mix of shapes)")
    fewer = res.get("gemm_fewer_threads_per_step")
    if fewer:
        t = res.get("threads", {})
        why = (f": other processes kept {t['others_cores']:.2f} cores busy at the last sample"
               if "others_cores" in t else "")
        lines.append(f"- {fewer:.0f} of {n.get('gemm', 0):.0f} GEMMs per step ran on fewer BLAS threads "
                     f"than the yardstick's {ref.get('threads')} (tracejit.compiler.cpu.runtime.coreshare's load policy"
                     f"{why}; small products always run on one)")
    others = res.get("others_cores_steps")
    if others and None not in others:
        lines.append(f"- other processes kept {others[0]:.2f} cores busy during the steps timed whole, "
                     f"{others[1]:.2f} during the steps with every call timed" + (
                         " (a step waits for a core they hold: compare runs only at like figures)"
                         if max(others) > 0.5 else ""))
    work = res.get("kernel_work_steps")
    if work and any(work):
        lines.append(f"- kernel modules loaded or compiled during the steps timed whole: {work[0]}, "
                     f"during the steps with every call timed: {work[1]} (those figures include them)")
    if machine_sgemm and machine_sgemm.get("gflops"):
        lines.append(f"- sgemm {'x'.join(map(str, machine_sgemm['shape']))} in a fresh numpy-only "
                     f"process: {machine_sgemm['gflops']:.0f} GFLOP/s")
    t = res.get("threads", {})
    lines.append("- threads: " + ", ".join(f"{k}={v}" for k, v in t.items()))
    kern = res.get("kernels")
    if kern:
        ms = sum(r["ms"] for r in kern)
        bw = res.get("store_bandwidth") or {}
        yard = (f" (this process: copy {bw['bandwidth_gbps']:.1f} GB/s, computed stores "
                f"{bw.get('numba_scale_gbps', 0):.1f} GB/s)" if bw.get("bandwidth_gbps") else "")
        lines.append(f"- fused kernels: {res['kernel_mb_per_step']:.1f} MB of arguments per step in "
                     f"{ms:.2f} ms = {res['kernel_mb_per_step'] / ms if ms else 0:.1f} GB/s{yard}; "
                     f"slowest: " + ", ".join(f"{r['label']} {r['ms']:.2f} ms ({r['gbps']:.1f} GB/s)"
                                              for r in kern[:4]))
    lines += ["", "| GEMM (m×k×n, layouts) | threads | per step | in step ms | GFLOP/s | alone ms | GFLOP/s "
              "| alone, cold caches ms | alone, all threads ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["gemms"]:
        # a pair's products ran at once, one thread each; alone they replay on the count given
        threads = f"{r.get('threads')}, paired" if r.get("paired") else r.get("threads")
        lines.append(f"| {r['m']}×{r['k']}×{r['n']} {r['layouts']} | {threads} | {r['per_step']:.0f} | "
                     f"{r['step_ms']:.3f} | {r['step_gflops']:.0f} | {r['alone_ms']:.3f} | "
                     f"{r['alone_gflops']:.0f} | {r.get('cold_ms', float('nan')):.3f} | "
                     f"{r.get('alone_full_ms', r['alone_ms']):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 steps after 1 warm-up")
    ap.add_argument("--eager", action="store_true", help="tracejit eager instead of tj.script")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)
    steps = args.steps or (4 if args.quick else 20)
    res = mlp_breakdown(steps=steps, warmup=1 if args.quick else 5, compiled=not args.eager,
                        sgemm_repeat=3 if args.quick else 15)
    print(f"load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "")
    print(render(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
