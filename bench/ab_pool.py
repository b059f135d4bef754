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


def ops(rounds):
    """Pooling alone, fwd and fwd+bwd, at the CNN's two shapes (ReLU'd: ties at zero)."""
    import numpy as np
    for shape in ((64, 32, 26, 26), (64, 64, 11, 11)):
        x = np.maximum(np.random.default_rng(0).standard_normal(shape), 0).astype(np.float32)
        a = tj.tensor(x, requires_grad=True)
        best = {}
        for _ in range(rounds):
            for name, f in (("composite", _composite), ("prim", _prim)):
                P.max_pool2d = f
                o = tj.max_pool2d(a, 2)
                g = tj.tensor(np.ones(o.shape, np.float32))
                t0 = time.perf_counter()
                o = tj.max_pool2d(a, 2)
                t1 = time.perf_counter()
                o.backward(g)
                t2 = time.perf_counter()
                f0, b0 = best.get(name, (1e9, 1e9))
                best[name] = (min(f0, t1 - t0), min(b0, t2 - t1))
        P.max_pool2d = _prim
        for name, (f, b) in best.items():
            print(f"max_pool2d {shape} {name:9s} fwd {1e3 * f:6.2f} ms  bwd {1e3 * b:6.2f} ms")


def main():
    if "--ops" in sys.argv:
        ops(20)
        print("uptime:", os.popen("uptime").read().strip())
        return
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
