"""An NT product ``g @ b.T`` (g (m, k), b (n, k), both row-major) timed in the forms a
plan could run it, on one BLAS thread, over a grid of shapes: the measurement behind
compiler/cpu/gemm/products.py's `rows_first`.

    python -m bench.nt_forms [--rounds N] [--dtype float32|float64] [--rows 2,4,...] [--json FILE]

Forms: ``nt`` numpy's ``g @ b.T``; ``swap`` ``(b @ g.T).T`` (BLAS's M the other side, the
result a transposed view); ``swap_c`` the same with the result copied row-major;
``swap_nn`` ``(b @ g.T.copy()).T`` copied row-major (an NN product and two copies). Each
cell is the median over `--rounds` interleaved rounds of thread CPU time per call (each
round as many calls as fill 2 ms), so other processes on the cores move it little. The
table lists each form's time over ``nt``'s (below 1: the form wins).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
INNER = (16, 64, 256, 1024, 4096)
COLS = (16, 64, 256, 1024)
FORMS = {
    "nt": lambda g, b: g @ b.T,
    "swap": lambda g, b: (b @ g.T).T,
    "swap_c": lambda g, b: np.ascontiguousarray((b @ g.T).T),
    "swap_nn": lambda g, b: np.ascontiguousarray((b @ np.ascontiguousarray(g.T)).T),
}


def _per_call(fn, g, b, budget: float = 0.002) -> float:
    t0 = time.thread_time()
    fn(g, b)
    one = max(time.thread_time() - t0, 1e-7)
    reps = max(1, min(2000, int(budget / one)))
    t0 = time.thread_time()
    for _ in range(reps):
        fn(g, b)
    return (time.thread_time() - t0) / reps


def measure(m: int, k: int, n: int, dtype, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    g = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n, k)).astype(dtype)
    times: dict = {name: [] for name in FORMS}
    for fn in FORMS.values():
        fn(g, b)
    for r in range(rounds):
        order = list(FORMS.items()) if r % 2 == 0 else list(FORMS.items())[::-1]
        for name, fn in order:
            times[name].append(_per_call(fn, g, b))
    return {name: statistics.median(v) for name, v in times.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", default=None)
    p.add_argument("--rows", default=None, help="comma-separated m values (default: all of ROWS)")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits
    rows = []
    print(f"{args.dtype}: form time / nt time, one BLAS thread")
    print(f"{'m':>4} {'k':>5} {'n':>5} {'nt us':>9} " + " ".join(f"{f:>8}" for f in FORMS if f != "nt"))
    for m in (tuple(int(v) for v in args.rows.split(",")) if args.rows else ROWS):
        for k in INNER:
            for n in COLS:
                with threadpool_limits(1):
                    t = measure(m, k, n, np.dtype(args.dtype), args.rounds)
                rows.append({"m": m, "k": k, "n": n, "us": {f: round(v * 1e6, 3) for f, v in t.items()}})
                print(f"{m:4} {k:5} {n:5} {t['nt'] * 1e6:9.1f} "
                      + " ".join(f"{t[f] / t['nt']:8.2f}" for f in FORMS if f != "nt"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dtype": args.dtype, "rounds": args.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
