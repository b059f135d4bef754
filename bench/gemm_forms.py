"""The MLP step's GEMMs in every form BLAS could run them, in a process that loads numpy alone.

    python -m bench.gemm_forms [--calls N] [--breakdown FILE]

For each product of the ``mlp`` workload's step (batch 256, 784->1024->1024->10: the same
shapes and operand layouts `python -m bench.breakdown` lists) it times numpy's sgemm with
the operands and output as the step has them, then the forms a plan could choose instead:

- ``1 thread``: one BLAS thread (what each product of a pair gets, compiler/gemm_steps.py);
- ``out^T``: the output written transposed (``C^T = B^T A^T`` into an (n, m) C-contiguous
  array): feature-major activations, or a weight gradient stored (in, out);
- ``ld+16``: every operand and the output with 16 floats of padding after each row (where a
  dimension is 1024, rows 4 KiB apart map to the same cache sets);
- ``w ld+16`` / ``out ld+16``: the padding on the (n, k) or (k, n) weight alone, on the
  output alone.

Each cell: median milliseconds of `--calls` back-to-back calls (their best in brackets), warm
caches, output preallocated. ``--breakdown FILE`` (a ``python -m bench.breakdown --json``
file) adds the step's own median per product. The breakdown's accounting is untouched: this
only says which form of a product is fastest on the machine, to choose a plan's formulation
by measurement. Run it under the measuring lock (a shared machine's load moves every cell).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

# (label, m, k, n, layouts of a and b: C row-major, F a transposed row-major array)
PRODUCTS = (
    ("fwd1 x @ W1.T", 256, 784, 1024, "CF"),
    ("fwd2 h1 @ W2.T", 256, 1024, 1024, "CF"),
    ("logits h2 @ W3.T", 256, 1024, 10, "CF"),
    ("dX3 g3 @ W3", 256, 10, 1024, "CC"),
    ("dW3 g3.T @ h2", 10, 256, 1024, "FC"),
    ("dX2 g2 @ W2", 256, 1024, 1024, "CC"),
    ("dW2 g2.T @ h1", 1024, 256, 1024, "FC"),
    ("dW1 g1.T @ x", 1024, 256, 784, "FC"),
)
PAD = 16


def _array(rows: int, cols: int, pad: int, rng=None) -> np.ndarray:
    """A (rows, cols) float32 C-ordered array whose rows lie `cols + pad` floats apart: the
    next normal values of `rng` (the same whatever the padding), uninitialized without it."""
    out = np.empty((rows, cols + pad), np.float32)[:, :cols]
    if rng is not None:
        out[...] = rng.standard_normal((rows, cols), dtype=np.float32)
    return out


def _operand(shape: tuple, layout: str, pad: int, rng) -> np.ndarray:
    if layout == "F":
        return _array(shape[1], shape[0], pad, rng).T
    return _array(shape[0], shape[1], pad, rng)


def _time(fn, calls: int) -> tuple[float, float]:
    fn()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def forms(m: int, k: int, n: int, lay: str, calls: int) -> dict:
    """{form: (median s, best s)} of one product. Every form multiplies the same operands
    (values; their memory differs) and its result is checked against the first form's."""
    from threadpoolctl import threadpool_limits
    weight = 0 if lay == "FC" else 1     # the operand the step's optimizer writes in place
    res: dict = {}
    results: dict = {}

    def run(name, pads=(0, 0, 0), transposed=False, threads=None):
        rng = np.random.default_rng(0)   # the same values in every form
        a = _operand((m, k), lay[0], pads[0], rng)
        b = _operand((k, n), lay[1], pads[1], rng)
        if transposed:
            out = _array(n, m, pads[2])
            fn = lambda: np.matmul(b.T, a.T, out=out)   # noqa: E731
        else:
            out = _array(m, n, pads[2])
            fn = lambda: np.matmul(a, b, out=out)       # noqa: E731
        with threadpool_limits(threads):
            res[name] = _time(fn, calls)
        results[name] = out.T if transposed else out

    run("as in the step")
    run("1 thread", threads=1)
    run("out^T", transposed=True)
    if 1024 in (m, k, n):
        run(f"ld+{PAD}", (PAD, PAD, PAD))
        w = [0, 0, 0]
        w[weight] = PAD
        run(f"w ld+{PAD}", tuple(w))
        run(f"out ld+{PAD}", (0, 0, PAD))
    ref = results["as in the step"]
    for name, got in results.items():
        # other BLAS paths may sum in another order: float32 rounding, nothing more
        if not np.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max())):
            raise AssertionError(f"gemm_forms: {name} of {m}x{k}x{n} {lay} is not the same product")
    return res


def _step_medians(path: str) -> dict:
    with open(path) as f:
        res = json.load(f)
    return {(r["m"], r["k"], r["n"], r["layouts"]): r["step_ms"] for r in res.get("gemms", [])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gemm_forms", description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=100, help="timed calls per form (default 100)")
    ap.add_argument("--breakdown", default=None, help="a `python -m bench.breakdown --json` file")
    args = ap.parse_args(argv)
    step = _step_medians(args.breakdown) if args.breakdown else {}
    print(f"load average {os.getloadavg()[0]:.2f}; numpy {np.__version__}; "
          f"median ms [best] of {args.calls} calls, warm caches")
    for label, m, k, n, lay in PRODUCTS:
        res = forms(m, k, n, lay, args.calls)
        flop = 2.0 * m * k * n
        base = res["as in the step"][0]
        cells = [f"{name} {med * 1e3:.3f} [{best * 1e3:.3f}] {flop / med / 1e9:.0f} GF/s"
                 + ("" if name == "as in the step" else f" ({med / base - 1:+.1%})")
                 for name, (med, best) in res.items()]
        in_step = step.get((m, k, n, lay))
        head = f"{label} {m}x{k}x{n} {lay}" + (f" (in the step {in_step:.3f})" if in_step else "")
        print(head + ":\n    " + "\n    ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
