"""Products with one dimension of at most 16 (a classifier head's) by numba kernels that
pack nothing.

Why: the MLP step's head (256 x 1024 activations, 10 classes) makes three such products
each step: the logits ``h @ w.T + b`` (256x1024x10, w row-major: nn.Linear's layout), the
input gradient ``g @ w`` (256x10x1024) and the weight gradient ``g.T @ h`` (10x256x1024).
They are 0.2% of the step's flops and took 0.12-0.18 ms each in it (30-45 GFLOP/s, ~4% of
its GEMM time): BLAS packs both operands into panels for a product whose work is one pass
over a 1 MB operand, which the two cores' shares of a row kernel just wrote (or, for ``g @
w``, a 1 MB output written cold). Timed after a two-thread rewrite of that operand (notes
mlp20/cold.py, SCHED_FIFO, load 6-7, min/median us, 150 rounds): logits 86/152 (BLAS, two
threads) against 73/76 by the dot kernel; ``g @ w`` 136/143 against 87/90 by the
register-tile kernel on one thread (into a warm output); ``g.T @ h`` 121/133 against 83/109.
In the step a cold 1 MB output is written at one core's store rate, so ``g @ w`` and ``g.T
@ h`` run as the tile kernel's two halves, one on each core (ops/halves.py, `HALVES`).
MLP step, breakdown, SCHED_FIFO, policy off, 4 runs each (in-step medians, ms): logits
0.130-0.140 against 0.153-0.182; ``g @ w`` 0.091-0.114 against 0.104-0.136; ``g.T @ h``
0.092-0.095 against 0.116-0.122. The step itself did not get faster (one process, 6 ABBA
rounds: 11.92 against 11.93 ms median): the operands' cache lines still move, in the next
kernel instead.

- A small N with an F-contiguous b (``x @ w.T``, w's n rows C-contiguous): a dot kernel
  (`source`), 4 rows of x by 4 rows of w summed over K at once (16 sums, each a vector
  reduction: ``reassoc`` lets LLVM split each sum over a vector's lanes), on this thread.
  Optionally adds a bias (the compiled plans' `BiasGemm`, compiler/biasgemm.py).
- A small K or a small M with a C-contiguous b: ops/rows_gemm.py's register-tile kernel,
  which reads b's rows in place and a as it lies (row-major or a transposed view), in two
  halves (`halves.thin`: by rows, or by depth for few rows) where two cores are free, else
  not here (None).

Which products: 2-D numpy float32/float64 operands of one dtype, m*k*n from `MIN_MNK` to
below `MAX_MNK` (coreshare.matmul asks here first in that range) and the smallest of m, k, n
at most `MAX_THIN`. Below `MIN_MNK` BLAS keeps a product on one thread and its packing is
cheap (the CNN head's 64x1600x10: not measured here); from `MAX_MNK` the register-tile
kernel's own bounds and the halves (ops/halves.py) apply. Results differ from BLAS's in the
last bits (another summation order), as BLAS's own do between thread counts.

Loaded with ops/native.py's policy as rows_gemm's kernel: no compile in a call in sync mode
(loaded from the disk cache only), compiled by the workers in background mode; `product`
returns None until then (the caller runs numpy's product).
"""
from __future__ import annotations

import numpy as np

from .. import coreshare
from . import halves, rows_gemm
from .native import kernel as _kernel

__all__ = ["product", "threads", "source", "HALVES", "ENABLED", "MAX_THIN", "MIN_MNK", "MAX_MNK"]

# The switch (tests and measurements turn it off to compare).
ENABLED = True
HALVES = True
MAX_THIN = coreshare.SKINNY_THIN
MIN_MNK = coreshare.SKINNY_MNK
MAX_MNK = coreshare.HALVES_MNK

# out (m, n) = x (m, K) @ w (n, K).T (+ bias): x and w C-contiguous. Blocks of 4 x 4 sums, then
# the rest of w's rows 4 x 1, then the rest of x's rows 1 x 1. ``reassoc`` (not full fastmath:
# no finite-math assumption, so NaN and inf propagate as in BLAS) vectorizes each sum.
_DOT = '''
import numpy as np
from numba import njit

_FM = {"reassoc", "contract"}


@njit("void(Array({t}, 2, 'C', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), boolean, {t}[:, ::1])",
      cache=CACHE, boundscheck=False, nogil=True, fastmath=_FM)
def kernel(x, w, bias, has_bias, out):
    m, kd = x.shape
    n = w.shape[0]
    z = np.{t}(0)
    mt = m - m % 4
    nt = n - n % 4
    for i in range(0, mt, 4):
        for j in range(0, nt, 4):
            s00 = z; s01 = z; s02 = z; s03 = z
            s10 = z; s11 = z; s12 = z; s13 = z
            s20 = z; s21 = z; s22 = z; s23 = z
            s30 = z; s31 = z; s32 = z; s33 = z
            for k in range(kd):
                x0 = x[i, k]; x1 = x[i + 1, k]; x2 = x[i + 2, k]; x3 = x[i + 3, k]
                w0 = w[j, k]; w1 = w[j + 1, k]; w2 = w[j + 2, k]; w3 = w[j + 3, k]
                s00 += x0 * w0; s01 += x0 * w1; s02 += x0 * w2; s03 += x0 * w3
                s10 += x1 * w0; s11 += x1 * w1; s12 += x1 * w2; s13 += x1 * w3
                s20 += x2 * w0; s21 += x2 * w1; s22 += x2 * w2; s23 += x2 * w3
                s30 += x3 * w0; s31 += x3 * w1; s32 += x3 * w2; s33 += x3 * w3
            out[i, j] = s00; out[i, j + 1] = s01; out[i, j + 2] = s02; out[i, j + 3] = s03
            out[i + 1, j] = s10; out[i + 1, j + 1] = s11; out[i + 1, j + 2] = s12; out[i + 1, j + 3] = s13
            out[i + 2, j] = s20; out[i + 2, j + 1] = s21; out[i + 2, j + 2] = s22; out[i + 2, j + 3] = s23
            out[i + 3, j] = s30; out[i + 3, j + 1] = s31; out[i + 3, j + 2] = s32; out[i + 3, j + 3] = s33
        for j in range(nt, n):
            s0 = z; s1 = z; s2 = z; s3 = z
            for k in range(kd):
                wk = w[j, k]
                s0 += x[i, k] * wk; s1 += x[i + 1, k] * wk; s2 += x[i + 2, k] * wk; s3 += x[i + 3, k] * wk
            out[i, j] = s0; out[i + 1, j] = s1; out[i + 2, j] = s2; out[i + 3, j] = s3
    for i in range(mt, m):
        for j in range(n):
            s = z
            for k in range(kd):
                s += x[i, k] * w[j, k]
            out[i, j] = s
    if has_bias:
        for i in range(m):
            for j in range(n):
                out[i, j] += bias[j]
'''


def source(dtype: str) -> str:
    """The dot kernel's module source for `dtype` (float32 or float64)."""
    return _DOT.replace("{t}", dtype)


_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_loaded: dict = {}   # dtype name -> the loaded dot kernel


def _dot(t: str):
    fn = _loaded.get(t)
    if fn is None:
        fn = _kernel(("skinny_gemm", t), lambda: source(t), sync_compiles=False).get()
        if fn is None:
            return None
        _loaded[t] = fn
    return fn


def threads(m: int, k: int, n: int) -> int:
    """The threads an (m, k) @ (k, n) product in range runs on here (what a profiler records
    beside it): the dot kernel one, the register-tile kernel's halves two."""
    return 2 if HALVES and n > MAX_THIN else 1


def product(a, b, bias=None):
    """``a @ b`` (``+ bias``: n values, only for the dot kernel's products) by the kernels
    above, or None (run numpy's product): see the module docstring for which products."""
    if not ENABLED or type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    m, kd = a.shape
    n = b.shape[1]
    if b.shape[0] != kd or not MIN_MNK <= m * kd * n < MAX_MNK or min(m, kd, n) > MAX_THIN:
        return None
    if n <= MAX_THIN and b.flags.f_contiguous and not b.flags.c_contiguous and a.flags.c_contiguous:
        t = _NAMES.get(a.dtype)
        if t is None or b.dtype != a.dtype or (bias is not None and bias.dtype != a.dtype):
            return None
        fn = _dot(t)
        if fn is None:
            return None
        out = np.empty((m, n), a.dtype)
        has_bias = bias is not None
        fn(a, b.T, np.ascontiguousarray(bias.reshape(n)) if has_bias else b.T[0], has_bias, out)
        return out
    if bias is not None or (m > MAX_THIN and kd > MAX_THIN):
        return None
    if HALVES:
        return halves.thin(a, b)
    return rows_gemm.tiled(a, b)
