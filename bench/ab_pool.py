"""A/B: the LeNet-style CNN step (bench/impls/models.py) with max-pooling as the
pooling_prim primitives vs the former unfold + amax composite, eager and compiled,
alternating in one process (min of the rounds). ``python bench/ab_pool.py [rounds]``."""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TRACEJIT_COMPILE", "sync")
import tracejit as tj  # noqa: E402
from tracejit.ops import pooling_prim as P  # noqa: E402
from tracejit.ops.conv import unfold  # noqa: E402
from tracejit.ops.reductions import amax  # noqa: E402
from tracejit.ops.shape import reshape  # noqa: E402

from bench.impls import models  # noqa: E402

_prim = P.max_pool2d


def _composite(x, k, s, p, d):
    """The former path: every window copied into columns, amax, backward through fold."""
    n, c, h, w = x.shape
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    cols = reshape(unfold(x, k, s, p, d, pad_value=-float("inf")), (n, c, k[0] * k[1], oh * ow))
    return reshape(amax(cols, 2), (n, c, oh, ow))


def make(variant, compiled):
    P.max_pool2d = _prim if variant == "prim" else _composite
    step, loss = models.model_step(tj, tj.script if compiled else (lambda f: f), "cnn")
    step()  # compiles when scripted
    return step, loss


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    order = ("prim", "composite") if os.environ.get("AB_PRIM_FIRST") else ("composite", "prim")
    cases = [(v, c) for c in (False, True) for v in order]
    steps = {case: make(*case) for case in cases}
    best = {case: float("inf") for case in cases}
    for _ in range(rounds):
        for case in cases:
            P.max_pool2d = _prim if case[0] == "prim" else _composite
            step, _ = steps[case]
            for _ in range(3):
                t = time.perf_counter()
                step()
                best[case] = min(best[case], time.perf_counter() - t)
    P.max_pool2d = _prim
    print("uptime:", os.popen("uptime").read().strip())
    for case in cases:
        print(f"cnn {'compiled' if case[1] else 'eager':8s} {case[0]:9s} "
              f"min {1e3 * best[case]:7.2f} ms/step  loss {steps[case][1]():.6f}")


if __name__ == "__main__":
    main()
