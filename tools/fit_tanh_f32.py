"""Fit and check the float32 tanh of ``tracejit.compiler.mathlib``.

    python tools/fit_tanh_f32.py [--np 5] [--nq 3] [--lim L] [--check]

tanh(x) = x * P(x^2) / Q(x^2) on |x| <= lim = 9.0109138 (the smallest float32
whose tanh rounds to 1; the kernel clamps x to +-lim), P(0) = Q(0) = 1 so
that tanh(x) == x exactly for tiny x, and lim * P(lim^2) / Q(lim^2) == 1
exactly in float32 (a constraint of the fit, then one coefficient nudged by
an ulp if rounding broke it) so that the clamp alone saturates to +-1.

Fit: minimax of the error *in float32 ulps of tanh* (not plain relative
error: just below 1 a float32 ulp is relatively half as large as at 0.5)
by Loeb's iteration: with Q_k the previous denominator, solve the linear
program  min E  s.t.  |P(t) - f(t) Q(t)| <= E * f(t) |Q_k(t)| * u(t)  on a
dense grid (f(t) = tanh(sqrt t)/sqrt t from mpmath, u the relative size of a
float32 ulp of tanh there), a few dozen times.  Coefficients are then rounded
to float32.

``--check`` then measures the maximum error of the real kernel
(``mathlib.tanh_f32`` as compiled, after the coefficients were pasted there)
against numpy's float64 tanh over every float32 input: all 2**32 bit
patterns (positive and negative, subnormals, inf, nan).  ~3 minutes on 2
cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def fit(n_p: int, n_q: int, lim: float, iterations: int = 30):
    import mpmath as mp
    from scipy.optimize import linprog

    mp.mp.dps = 40
    x = np.unique(np.concatenate([np.linspace(0, lim, 4000), lim * np.linspace(0, 1, 2000) ** 3]))
    t = x * x
    f = np.array([1.0 if v == 0 else float(mp.tanh(mp.sqrt(mp.mpf(v))) / mp.sqrt(mp.mpf(v)))
                  for v in t])
    th = np.where(x > 0, f * x, 1.0)
    u = np.where(x > 0, np.spacing(th.astype(np.float32)).astype(np.float64) / th, 2.0 ** -23)
    s = t / lim ** 2                        # scaled variable keeps the LP well conditioned
    pc = np.stack([s ** k for k in range(1, n_p + 1)], 1)
    qc = np.stack([s ** k for k in range(1, n_q + 1)], 1)
    q_prev = np.ones_like(s)
    # lim * P(lim^2) / Q(lim^2) = 1 exactly: clamping |x| to lim then saturates
    # to exactly +-1 with no extra select in the kernel
    a_eq = np.concatenate([np.ones(n_p), -np.ones(n_q) / lim, [0.0]])[None, :]
    b_eq = np.array([1.0 / lim - 1.0])
    nvar = n_p + n_q + 1
    cost = np.zeros(nvar)
    cost[-1] = 1.0
    for _ in range(iterations):
        w = f * np.abs(q_prev) * u
        # P(s) - f Q(s) with P(0) = Q(0) = 1 moved to the right-hand side
        a = np.hstack([pc, -f[:, None] * qc, -w[:, None]])
        b = np.hstack([-pc, f[:, None] * qc, -w[:, None]])
        res = linprog(cost, A_ub=np.vstack([a, b]), b_ub=np.concatenate([f - 1.0, 1.0 - f]),
                      A_eq=a_eq, b_eq=b_eq, bounds=[(None, None)] * nvar, method="highs")
        z = res.x
        p = np.concatenate([[1.0], z[:n_p]])
        q = np.concatenate([[1.0], z[n_p:n_p + n_q]])
        q_prev = np.polyval(q[::-1], s)
    err_ulp = np.max(np.abs(np.polyval(p[::-1], s) / q_prev - f) / (f * u))
    scale = [lim ** (-2 * k) for k in range(max(n_p, n_q) + 1)]
    return ([float(np.float32(p[k] * scale[k])) for k in range(n_p + 1)],
            [float(np.float32(q[k] * scale[k])) for k in range(n_q + 1)], float(err_ulp))


def eval_f32(p, q, x: float) -> np.float32:
    """The kernel's float32 evaluation (Horner steps contracted to FMAs, as
    LLVM does under ``fastmath={'contract'}``), emulated with numpy."""
    f32 = np.float32

    def fma(a, b, c):      # a*b is exact in float64; one rounding to float32
        return f32(np.float64(a) * np.float64(b) + np.float64(c))

    x = f32(x)
    t = f32(x * x)
    pv, qv = f32(p[-1]), f32(q[-1])
    for c in p[-2::-1]:
        pv = fma(t, pv, f32(c))
    for c in q[-2::-1]:
        qv = fma(t, qv, f32(c))
    return f32(f32(x * pv) / qv)


def saturate(p: list, q: list, lim: float) -> list:
    """Nudge one numerator coefficient by the fewest float32 ulps so that the
    float32 evaluation at ``lim`` is exactly 1 (rounding the coefficients
    moves it by an ulp or so)."""
    if eval_f32(p, q, lim) == 1.0:
        return p
    for steps in range(1, 65):
        for i in range(1, len(p)):
            for direction in (np.inf, -np.inf):
                v = np.float32(p[i])
                for _ in range(steps):
                    v = np.nextafter(v, np.float32(direction))
                cand = p[:i] + [float(v)] + p[i + 1:]
                if eval_f32(cand, q, lim) == 1.0:
                    return cand
    raise RuntimeError("no coefficient nudge within 64 ulps saturates at %r" % lim)


def check() -> tuple[float, float]:
    """Max ulp error of mathlib.tanh_f32 over all float32 inputs, and where."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "compiler"))
    from numba import njit, prange
    from test_mathlib import ulp_error
    from tracejit.compiler.mathlib import tanh_f32

    @njit(parallel=True, error_model="numpy")
    def kernel(x, out):
        for i in prange(x.shape[0]):
            out[i] = tanh_f32(x[i])

    worst, where = 0.0, 0.0
    chunk = 1 << 24
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        y = np.empty_like(x)
        kernel(x, y)
        with np.errstate(invalid="ignore"):
            e = ulp_error(y, np.tanh(x.astype(np.float64)), "float32")
        i = int(np.argmax(e))
        if e[i] > worst:
            worst, where = float(e[i]), float(x[i])
    return worst, where


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=5)
    ap.add_argument("--nq", type=int, default=3)
    # the smallest float32 whose tanh rounds to 1
    ap.add_argument("--lim", type=float, default=9.010913848876953)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    p, q, e = fit(a.np, a.nq, a.lim)
    p = saturate(p, q, a.lim)
    print("P =", p)
    print("Q =", q)
    print("approximation error (float64 evaluation): %.3f ulp" % e)
    if a.check:
        t0 = time.time()
        worst, where = check()
        print("mathlib.tanh_f32, all 2**32 inputs: max %.3f ulp at x = %r (%.0f s)"
              % (worst, where, time.time() - t0))


if __name__ == "__main__":
    main()
