"""Benchmark: GELU over 4M float32 with tracejit.compiler.mathlib vs libm.

    python bench/bench_mathlib.py [--n N] [--threads T] [--repeat R]

Kernel (tanh form): a = x*y + z; out = 0.5*a*(1 + tanh(0.79788456*(a + 0.044715*a**3)))
run as a 2-thread ``njit(parallel=True)`` prange loop.  Variants:

* ``math.tanh``           libm tanhf: scalar call, the loop does not vectorize
* ``mathlib.tanh_f32``    our vectorizable tanh
* ``mathlib.exp_f32``     the same function written a / (1 + exp(-2u))
* ``mathlib.sigmoid_f32`` the same function written a * sigmoid(2u)
* ``math.exp``            the exp form with libm expf (scalar)

and two bandwidth references: ``copy`` (1 read + 1 write) and ``fma`` (out =
x*y + z: the same 3 reads + 1 write as GELU, i.e. its memory-bound floor).
Prints the best and median wall time of each in ms and the ratio to the fma
floor, plus the best CPU time of the same loop compiled serially, measured
with the thread's CPU clock: on a shared, busy machine the wall times of a
2-thread kernel are dominated by scheduling, the CPU time is not (for a
compute-bound kernel the quiet-machine 2-thread wall time is about half of
it, but never below the fma floor).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numba  # noqa: E402
from numba import njit, prange  # noqa: E402,F401

from tracejit.compiler.mathlib import exp_f32, sigmoid_f32, tanh_f32  # noqa: E402

F = np.float32
C0 = F(0.79788456)     # sqrt(2/pi)
C1 = F(0.044715)
HALF = F(0.5)
ONE = F(1.0)
TWO = F(2.0)
OPTS = dict(error_model="numpy", cache=False)


def gelu_libm_tanh(x, y, z, out):
    for i in prange(x.shape[0]):
        a = x[i] * y[i] + z[i]
        out[i] = HALF * a * (ONE + math.tanh(C0 * (a + C1 * a * a * a)))


def gelu_tanh_f32(x, y, z, out):
    for i in prange(x.shape[0]):
        a = x[i] * y[i] + z[i]
        out[i] = HALF * a * (ONE + tanh_f32(C0 * (a + C1 * a * a * a)))


def gelu_exp_f32(x, y, z, out):
    # 0.5*a*(1 + tanh(u)) == a / (1 + exp(-2u))
    for i in prange(x.shape[0]):
        a = x[i] * y[i] + z[i]
        u = C0 * (a + C1 * a * a * a)
        out[i] = a / (ONE + exp_f32(-TWO * u))


def gelu_sigmoid_f32(x, y, z, out):
    for i in prange(x.shape[0]):
        a = x[i] * y[i] + z[i]
        out[i] = a * sigmoid_f32(TWO * (C0 * (a + C1 * a * a * a)))


def gelu_libm_exp(x, y, z, out):
    for i in prange(x.shape[0]):
        a = x[i] * y[i] + z[i]
        u = C0 * (a + C1 * a * a * a)
        out[i] = a / (ONE + math.exp(-TWO * u))


def copy(x, y, z, out):
    for i in prange(x.shape[0]):
        out[i] = x[i]


def fma(x, y, z, out):
    for i in prange(x.shape[0]):
        out[i] = x[i] * y[i] + z[i]


def gelu_ref(x, y, z):
    a = x.astype(np.float64) * y + z
    return 0.5 * a * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))


def bench(fn, args, repeat):
    """(best, median) wall-clock ms."""
    fn(*args)                                   # compile + warm up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3, float(np.median(ts)) * 1e3


def bench_cpu(fn, args, repeat):
    """Best CPU time (ms) of one serial call, measured with the thread's CPU
    clock: insensitive to other processes taking the cores (shared machine)."""
    fn(*args)
    best = math.inf
    for _ in range(max(5, repeat // 4)):
        t0 = time.thread_time_ns()
        fn(*args)
        best = min(best, (time.thread_time_ns() - t0) * 1e-6)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))

    rng = np.random.default_rng(0)
    x = rng.standard_normal(args.n).astype(np.float32)
    y = rng.standard_normal(args.n).astype(np.float32)
    z = rng.standard_normal(args.n).astype(np.float32)
    out = np.empty_like(x)
    ref = gelu_ref(x, y, z)

    print("GELU over %d float32, %d threads (numba %s, numpy %s), %d repeats"
          % (args.n, numba.get_num_threads(), numba.__version__, np.__version__, args.repeat))
    print("wall: best/median ms of the njit(parallel=True) prange kernel;  cpu: best CPU ms"
          " of the same loop compiled serial (thread CPU clock, robust to a busy machine)")
    rows = [("copy (1R+1W)", copy), ("fma x*y+z (3R+1W floor)", fma),
            ("gelu math.tanh (libm)", gelu_libm_tanh), ("gelu math.exp (libm)", gelu_libm_exp),
            ("gelu mathlib.tanh_f32", gelu_tanh_f32), ("gelu mathlib.exp_f32", gelu_exp_f32),
            ("gelu mathlib.sigmoid_f32", gelu_sigmoid_f32)]
    floor = cfloor = None
    print("%-26s %9s %9s %7s %9s %7s %11s" % ("kernel", "wall best", "median", "x floor",
                                              "cpu 1thr", "x floor", "max abs err"))
    for name, py in rows:
        par = njit(parallel=True, **OPTS)(py)
        ser = njit(parallel=False, **OPTS)(py)
        best, med = bench(par, (x, y, z, out), args.repeat)
        assert out.dtype == np.float32
        err = ("%11.3g" % np.max(np.abs(out - ref))) if name.startswith("gelu") else ""
        cpu = bench_cpu(ser, (x, y, z, out), args.repeat)
        if py is fma:
            floor, cfloor = best, cpu
        ratio = ("%7.2f" % (best / floor)) if floor else ""
        cratio = ("%7.2f" % (cpu / cfloor)) if cfloor else ""
        print("%-26s %9.3f %9.3f %7s %9.3f %7s %s" % (name, best, med, ratio, cpu, cratio, err))


if __name__ == "__main__":
    main()
