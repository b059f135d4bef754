"""Products with one dimension of at most 16 (a classifier head's) by numba kernels that
pack nothing, in two halves, one on each core.

Why: the MLP step's head (256 x 1024 activations, 10 classes) makes three such products
each step: the logits ``h @ w.T + b`` (256x1024x10, w row-major: nn.Linear's layout), the
input gradient ``g @ w`` (256x10x1024) and the weight gradient ``g.T @ h`` (10x256x1024).
They are 0.2% of the step's flops and took 0.12-0.18 ms each in it (30-45 GFLOP/s, ~4% of
its GEMM time): BLAS packs both operands into panels for a product whose work is one pass
over a 1 MB operand, which the two cores' shares of a row kernel just wrote (or, for
``g @ w``, a 1 MB output written cold).

- A small N with an F-contiguous b (``x @ w.T``, w's n rows C-contiguous): a dot kernel
  (`source`), 4 rows of x by 4 rows of w summed over K at once (16 sums, each a vector
  reduction: ``reassoc`` lets LLVM split each sum over a vector's lanes), adding the bias
  if given (a compiled plan's `GemmStep`, compiler/gemm_steps.py). Its two row halves run
  at once, on this thread and on OpenBLAS's worker (cfuncs on a record: compiler/cpu/gemm/halves.py's
  `launch`), where two cores are free; on this thread otherwise.
- A small K or a small M with a C-contiguous b: compiler/cpu/gemm/rows_gemm.py's register-tile kernel in
  two halves (`halves.thin`: by rows, or by depth for few rows), which reads b's rows in
  place and a as it lies (row-major or a transposed view); where they cannot run, numpy's
  product (one core's store rate writing ``g @ w``'s cold 1 MB output made the tile kernel
  on one thread slower than two BLAS threads in the step: 0.19-0.20 ms against 0.09-0.14).

Where the halves pay is placement: the logits' halves leave h's first rows in this core's
cache and its last in the worker's, and the weight gradient's depth halves read h the same
way (0.059-0.068 ms in the step, against 0.092-0.095 after a one-thread logits product and
0.116-0.122 by BLAS). MLP step, breakdown, SCHED_FIFO, policy off (in-step
medians, ms): logits 0.102 against 0.153-0.159 (BLAS); ``g @ w`` 0.091-0.104 against
0.118-0.128; ``g.T @ h`` 0.059-0.068 against 0.116-0.117; the three 0.26 against 0.39-0.40.
The step (one process, 16 rounds ABBA, load 9-10): -0.059 ms median per round (forward
-0.026, backward -0.063), lower in 11 of 16 rounds.

Which products: 2-D numpy float32/float64 operands of one dtype, m*k*n from `MIN_MNK` to
below `MAX_MNK` (`MAX_DOT_MNK` for the dot kernel's: router.matmul asks here first in that
range) and the smallest of m, k, n at most `MAX_THIN`. Below `MIN_MNK` BLAS keeps a product on
one thread and its packing is cheap (the CNN head's 64x1600x10: not measured here); from
`MAX_MNK` the register-tile kernel's own bounds and the halves (compiler/cpu/gemm/halves.py) apply. The dot
kernel goes on to `MAX_DOT_MNK` (the Transformer step's 2048x256x10 logits: router's
SKINNY_DOT_MNK says what it measured). Results differ from BLAS's in the
last bits (another summation order), as BLAS's own do between thread counts.

Loaded with compiler/cpu/kernels/loader.py's policy as rows_gemm's kernel: no compile in a call in sync mode
(loaded from the disk cache only), compiled by the workers in background mode; `product`
returns None until then (the caller runs numpy's product).
"""
from __future__ import annotations

import numpy as np

from . import router
from . import halves
from .... import envflags

__all__ = ["product", "threads", "source", "module_kernel", "MAX_THIN", "MIN_MNK", "MAX_MNK",
           "MAX_DOT_MNK"]

# The switch (tests and measurements turn it off to compare).
on = envflags.flag("TRACEJIT_SKINNY_GEMM")   # (the switch: tests, A/B measurements)
halves_on = envflags.flag("TRACEJIT_SKINNY_HALVES")   # (the switch: tests, A/B measurements)
MAX_THIN = router.SKINNY_THIN
MIN_MNK = router.SKINNY_MNK
MAX_MNK = router.HALVES_MNK
MAX_DOT_MNK = router.SKINNY_DOT_MNK

# out (m, n) = x (m, K) @ w (n, K).T (+ bias): x and w C-contiguous. Blocks of 4 x 4 sums, then
# the rest of w's rows 4 x 1, then the rest of x's rows 1 x 1. ``reassoc`` (not full fastmath:
# no finite-math assumption, so NaN and inf propagate as in BLAS) vectorizes each sum.
# no_rewrites on every function of the module: numba's IR rewrite passes (array expressions,
# constant folding, dead-branch pruning) find nothing to do here but scan: 0.089-0.091 ->
# 0.068-0.073 s of the module's compile; the same machine code (the kernel's CPython wrapper
# apart: another stack frame size).
_DOT = '''
import numpy as np
from numba import njit

_FM = {"reassoc", "contract"}


@njit("void(Array({t}, 2, 'C', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), boolean, {t}[:, ::1])",
      cache=CACHE, boundscheck=False, nogil=True, fastmath=_FM, no_rewrites=True)
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

# The dot kernel's two row halves as a cfunc on a record of int64s (compiler/cpu/gemm/halves.py's launch:
# record 0 on this thread, record 1 on OpenBLAS's worker): x's address and rows, K, w's
# address, n, the bias's address, has_bias, out's address; slot 15 the kernel's compiled code
# (`_Pair` puts it there once). The first half a multiple of 4 rows. The kernel is called
# through that address (voidptr.call_at), not by numba's call, which links the kernel's
# library into the cfunc's and has LLVM optimise and emit the 4 x 4 tiles a second time
# (the module's compile in a worker: 0.62-0.69 s before).
_PAIR = '''

from numba import cfunc
from tracejit.compiler.cpu.runtime.voidptr import call_at, call_pthread, carray_at
# (a record's slots from a tuple by one intrinsic, not 16 setitems each typed and lowered on
# its own: 0.50 -> 0.48 s of this module's compile; voidptr.put_row)
from tracejit.compiler.cpu.runtime.voidptr import put_row as _put


# (no CPython wrapper: only `dot_launch` calls it; called from Python it would crash)
@njit("void(int64[:, ::1], Array({t}, 2, 'C', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), boolean, {t}[:, ::1])", cache=CACHE, no_cpython_wrapper=True,
      no_rewrites=True)
def dot_records(r, x, w, bias, has_bias, out):
    m, kd = x.shape
    n = w.shape[0]
    h = (m // 2 + 3) // 4 * 4
    item = x.itemsize
    xd, wd, bd, od = np.int64(x.ctypes.data), np.int64(w.ctypes.data), np.int64(bias.ctypes.data), np.int64(out.ctypes.data)
    hb = np.int64(has_bias)
    _put(r, 0, (xd, h, kd, wd, n, bd, hb, od))
    _put(r, 1, (xd + h * kd * item, m - h, kd, wd, n, bd, hb, od + h * n * item))


# `dot_records`, then `entry` (dot_half's address) on both records at once through
# OpenBLAS's gotoblas_pthread at `pthread`: the whole launch in one dispatcher call, the GIL
# released (the filler and a ctypes call were two: ~9 us of the MLP step's logits on swept
# caches).
@njit("void(int64[:, ::1], Array({t}, 2, 'C', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "Array({t}, 1, 'C', readonly=True), boolean, {t}[:, ::1], int64, int64)", cache=CACHE, nogil=True,
      no_rewrites=True)
def dot_launch(r, x, w, bias, has_bias, out, pthread, entry):
    dot_records(r, x, w, bias, has_bias, out)
    call_pthread(pthread, 2, entry, np.int64(r.ctypes.data), 128)


@cfunc("void(voidptr)", cache=CACHE, no_rewrites=True)
def dot_half(rec):
    r = carray_at(rec, (16,), np.int64)
    m, kd, n = r[1], r[2], r[4]
    x = carray_at(r[0], (m, kd), np.{t})
    w = carray_at(r[3], (n, kd), np.{t})
    b = carray_at(r[5], (n,), np.{t})
    out = carray_at(r[7], (m, n), np.{t})
    call_at(r[15], kernel, (x, w, b, r[6] != 0, out))
'''


def source(dtype: str) -> str:
    """The dot kernel's module source for `dtype` (float32 or float64), with its halves."""
    return (_DOT + _PAIR).replace("{t}", dtype)


class _Pair:
    """One dtype's loaded dot halves: the launcher, the half's address and the records
    (compiler/cpu/gemm/halves.py's `launch` takes it)."""

    __slots__ = ("keep", "recs", "launch", "entry_address", "pthread")

    def __init__(self, module: dict):
        import ctypes

        from ..runtime import sharepool
        self.keep = module["dot_half"]     # its code lives as long as this
        self.entry_address = module["dot_half"].address
        self.launch = module["dot_launch"]
        # gotoblas_pthread's address (`dot_launch` calls it), 0 where none was found (tests
        # put a runner of their own here)
        sharepool.blas_worker.find()
        fn = sharepool.blas_worker.fn
        self.pthread = ctypes.cast(fn, ctypes.c_void_p).value or 0 if fn is not None else 0
        self.recs = np.zeros((2, 16), np.int64)
        from ..runtime.voidptr import native_address
        self.recs[:, 15] = native_address(module["kernel"])   # (`_PAIR`: the records' slot 15)


_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_loaded: dict = {}   # dtype name -> the loaded dot kernel


def module_kernel(t: str):
    """The `loader.NativeKernel` of dtype name `t`'s dot-kernel module (as rows_gemm's)."""
    return halves.kernel_of(("skinny_gemm", t), lambda: source(t))


def _dot(t: str):
    """(the loaded dot kernel, its `_Pair` or None), or None until the module is loaded."""
    got = _loaded.get(t)
    if got is None:
        loaded = halves.loaded_module(module_kernel(t))
        if loaded is None:
            return None
        fn, g = loaded
        pair = _Pair(g) if "dot_half" in g and "dot_launch" in g else None
        got = _loaded[t] = (fn, pair)
    return got


def threads(m: int, k: int, n: int) -> int | None:
    """The threads an (m, k) @ (k, n) product in range runs on here (what a profiler records
    beside it): two where its halves run (`halves_on()`, two cores free), else one; None before
    the dot kernel is loaded (BLAS runs it)."""
    if not _loaded:
        return None
    return 2 if halves_on() and halves.two_cores() else 1


def product(a, b, bias=None):
    """``a @ b`` (``+ bias``: n values, only for the dot kernel's products) by the kernels
    above, or None (run numpy's product): see the module docstring for which products."""
    if not on() or type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    m, kd = a.shape
    n = b.shape[1]
    mnk = m * kd * n
    if b.shape[0] != kd or not MIN_MNK <= mnk < MAX_DOT_MNK or min(m, kd, n) > MAX_THIN:
        return None
    bf = b.flags     # (read once: each ``flags`` is a new object)
    if n <= MAX_THIN and bf.f_contiguous and not bf.c_contiguous and a.flags.c_contiguous:
        t = _NAMES.get(a.dtype)
        if t is None or b.dtype != a.dtype or (bias is not None and bias.dtype != a.dtype):
            return None
        got = _dot(t)
        if got is None:
            return None
        fn, pair = got
        out = np.empty((m, n), a.dtype)
        has_bias = bias is not None
        args = (a, b.T, np.ascontiguousarray(bias.reshape(n)) if has_bias else b.T[0], has_bias, out)
        if not (halves_on() and pair is not None and m >= 8 and pair.pthread and halves.two_cores()
                and halves.launch(pair, pair.launch, *args, pair.pthread, pair.entry_address)):
            fn(*args)
        return out
    if bias is not None or (m > MAX_THIN and kd > MAX_THIN) or not halves_on() or mnk >= MAX_MNK:
        return None
    return halves.thin(a, b)
