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
kind of kernel (``dst[i] = src[i] * 2``, the same bytes as the copy): on the 2-core Xeon
of session 9 it ran at about half the copy's rate (copy 29.5 GB/s, scale 15.9 GB/s in
one run), and the GELU forward ran at 0.97x the bound computed from it. It is reported
next to the bound, which stays the copy's (the benchmark's stated yardstick). Unlike the workloads (medians), the yardstick is the *best*
sample: a bound should say what the memory system can do, not how noisy the run was.
"""
from __future__ import annotations

import os
import platform

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


def bandwidth(repeat: int = 15) -> dict:
    n = COPY_BYTES // 4
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
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
