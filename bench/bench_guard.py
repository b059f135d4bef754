"""Cost of the guard check on a cache hit (target: under 3 us per call for a few small inputs).

Run: ``python bench/bench_guard.py``. Prints, for 1, 2 and 4 small tensor inputs (plus a
runtime scalar for @script), the median time of the generated guard alone and of the
whole compiled call on a hit (guard + plan + kernel + wrapping the result).
"""
from __future__ import annotations

import statistics
import time

import tracejit as tj


def _median_us(fn, n: int = 20000, repeats: int = 7) -> float:
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(samples)


def main() -> None:
    print(f"{'inputs':<26}{'guard [us]':>12}{'whole call [us]':>18}")
    cases = {
        "1 tensor": (lambda a: a * 2.0 + 1.0, 1, "trace"),
        "2 tensors": (lambda a, b: a * b + 1.0, 2, "trace"),
        "4 tensors": (lambda a, b, c, d: a * b + c * d, 4, "trace"),
        "2 tensors + scalar (@script)": (None, 2, "script"),
    }
    for name, (fn, n, mode) in cases.items():
        args = [tj.randn(16) for _ in range(n)]
        if mode == "script":
            def scaled(a, b, s):
                return a * b + s
            cf = tj.script(scaled)
            args.append(0.5)
        else:
            cf = tj.trace(fn)
        cf(*args)
        entry = cf.entries[0]
        gm = tj.is_grad_enabled()
        targs = tuple(args)
        g = _median_us(lambda: entry.guard(targs, entry.const_tensors, gm))
        c = _median_us(lambda: cf(*args))
        print(f"{name:<26}{g:>12.2f}{c:>18.2f}")


if __name__ == "__main__":
    main()
