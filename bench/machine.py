"""What the machine can do: streaming-copy bandwidth, the yardstick for elementwise work.

A copy reads n bytes and writes n bytes; we count both, so "GB/s" is bytes moved per
second, and a kernel that must move B bytes cannot beat ``B / bandwidth``. Arrays are
64 MiB, twice the L3 of the machines we run on, so the copy streams from memory.

Two measurements: numpy's ``copyto`` (one thread) and a numba ``prange`` copy on all
cores; the bound uses the faster one. Both write into a preallocated destination so
page faults are not timed.

Both copies are glibc's ``memcpy`` (LLVM turns the numba loop into a call to it), whose
large-copy path writes whole cache lines without reading them first (``rep movsb`` /
non-temporal stores). A kernel that computes its output stores with ordinary
instructions, and the CPU reads each destination line before writing it (read for
ownership), so its stores cost twice the bytes. ``numba_scale_gbps`` measures that
kind of kernel (``dst[i] = src[i] * 2``, the same bytes as the copy): on a 2-core Xeon
it ran at about half the copy's rate (copy 29.5 GB/s, scale 15.9 GB/s). It is reported
next to the bound, which stays the copy's (the benchmark's stated yardstick). Unlike the workloads (medians), the yardstick is the *best*
sample: a bound should say what the memory system can do, not how noisy the run was.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable

import numpy as np

from .harness import measure

COPY_BYTES = 64 * 1024 * 1024


def _numba_copy():
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def copy(src, dst):
        for i in prange(src.shape[0]):
            dst[i] = src[i]

    return copy


def _numba_scale():
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def scale(src, dst):
        # computed stores: LLVM cannot make this loop a memcpy
        for i in prange(src.shape[0]):
            dst[i] = src[i] * np.float32(2.0)

    return scale


def _copy_buffers() -> tuple:
    """The yardstick copy's source and destination: `COPY_BYTES` of float32 each."""
    src = np.random.default_rng(0).standard_normal(COPY_BYTES // 4, dtype=np.float32)
    return src, np.empty_like(src)


def bandwidth(repeat: int = 15) -> dict:
    src, dst = _copy_buffers()
    moved = 2 * src.nbytes
    out: dict = {"copy_bytes": src.nbytes}
    t = measure(lambda: np.copyto(dst, src), warmup=2, repeat=repeat)
    out["numpy_copy_gbps"] = moved / t.min_s / 1e9
    try:
        import numba
        copy = _numba_copy()
        t = measure(lambda: copy(src, dst), warmup=2, repeat=repeat)
        out["numba_copy_gbps"] = moved / t.min_s / 1e9
        out["numba_threads"] = numba.get_num_threads()
        scale = _numba_scale()
        t = measure(lambda: scale(src, dst), warmup=2, repeat=repeat)
        out["numba_scale_gbps"] = moved / t.min_s / 1e9
    except Exception as exc:  # numba is a dependency, but the yardstick must not fail the run
        out["numba_error"] = f"{type(exc).__name__}: {exc}"
    out["bandwidth_gbps"] = max(out.get("numba_copy_gbps", 0.0), out["numpy_copy_gbps"])
    return out


# The paired measurement (`paired`): rounds of copies then calls, tens of milliseconds apart;
# in each round untimed copies and calls (at least `PAIRED_WARM` of each and `PAIRED_WARM_S`
# seconds of each) come before the timed ones.
PAIRED_ROUNDS = 11
PAIRED_WARM = 3
# Why so many untimed ones: the 2-core VM's "memory" is a shared last-level cache of hundreds
# of MiB, and the copy's 128 MiB and the GELU's 64-96 MiB evict each other, each recovering
# its own speed only over many repeats (with 3 untimed of each the per-pair ratio read
# 0.80-0.84x, with 10 or more ~1.0x, as each kind repeated alone). So each kind runs for
# ~40 ms (some 16 copies and 20 fwd+bwd calls) before it is timed: the copy and the call
# are each in their own steady state, still within a tenth of a second of each other.
PAIRED_WARM_S = 0.04


def paired(call: Callable[[], object], nbytes: int, rounds: int = PAIRED_ROUNDS,
           copy: Callable[[], object] | None = None, warm: int = PAIRED_WARM,
           warm_s: float = PAIRED_WARM_S) -> dict:
    """The bound and the workload's time side by side: ``rounds`` rounds, each timing the
    streaming copy (the yardstick's: the numba ``prange`` copy of `COPY_BYTES`, which is the
    faster one on every multi-core machine we run on) and then ``call()``, so each pair's
    bound comes from the memory system of the same moment. `bandwidth` runs in another
    process, before the systems, and the host's copy rate moved 27-57 GB/s between runs
    (while the GELU kernel's time moved far less), so a ratio built from it says as much about the
    moment as about the kernel.

    Each round runs copies until at least ``warm + 1`` of them and ``warm_s`` seconds have
    passed, then calls the same way, and times the last call: each kind meets the cache its
    own kind leaves, as in a plain repeated timing (see `PAIRED_WARM_S`). The pair's copy is
    the fastest of the round's copies (the bound only ever gets stricter this way).

    Returns the per-pair ratios (call time over the pair's bound: ``nbytes`` at the pair's
    copy rate), their median, min and max, the median call over the best round's bound,
    the medians of the copy rate and the call, and each round's call and bound.
    `copy` replaces the copy (tests); it must move ``2 * COPY_BYTES``.
    """
    if rounds < 1 or warm < 0 or warm_s < 0:
        raise ValueError(f"paired: rounds must be at least 1, warm and warm_s at least 0, "
                         f"got rounds={rounds}, warm={warm}, warm_s={warm_s}")
    moved = 2 * COPY_BYTES
    if copy is None:
        src, dst = _copy_buffers()
        numba_copy = _numba_copy()
        copy = lambda: numba_copy(src, dst)   # noqa: E731
        copy()   # compile outside the rounds
    copy_s, call_s = [], []
    for _ in range(rounds):
        copies = []
        start = time.perf_counter()
        while len(copies) <= warm or time.perf_counter() - start < warm_s:
            t0 = time.perf_counter()
            copy()
            copies.append(time.perf_counter() - t0)
        # the fastest of the round's copies: a copy the scheduler interrupted would
        # otherwise lend its pair a slack bound
        copy_s.append(min(copies))
        done, start = 0, time.perf_counter()
        while done < warm or time.perf_counter() - start < warm_s:
            call()
            done += 1
        t0 = time.perf_counter()
        call()
        call_s.append(time.perf_counter() - t0)
    # a pair's bound: nbytes at that copy's rate (moved / copy_s)
    bounds = [nbytes * k / moved for k in copy_s]
    ratios = [c / b for c, b in zip(call_s, bounds)]
    return {"rounds": rounds, "ratios": [round(r, 4) for r in ratios],
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            # the strictest reading: the median call over the best copy of all rounds
            "median_over_best_copy": statistics.median(call_s) / min(bounds),
            "copy_gbps_median": moved / statistics.median(copy_s) / 1e9,
            "copy_gbps_best": moved / min(copy_s) / 1e9,
            "call_ms_median": statistics.median(call_s) * 1e3,
            "bound_ms_median": statistics.median(bounds) * 1e3,
            "call_ms": [round(c * 1e3, 4) for c in call_s],
            "bound_ms": [round(b * 1e3, 4) for b in bounds]}


def describe() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "numpy": np.__version__}


def sgemm(repeat: int = 15) -> dict:
    """The reference sgemm's best rate (GFLOP/s) in this process, which has loaded only
    numpy: the ceiling for the GEMMs of the ``mlp`` step (see ``bench.breakdown``)."""
    from .breakdown import sgemm_rate
    return sgemm_rate(repeat=repeat)
