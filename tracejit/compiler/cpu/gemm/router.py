"""The GEMM router: which kernel or BLAS call runs a numpy product, on how many threads.

Why: BLAS is not the fastest way to run every product here. A head's products (a dimension
of at most `SKINNY_THIN`), few-row products (`coreshare.FEW_ROWS`), the two-layer step's
4M-8M products, a thin depth and a batch of small products each have a kernel or a split
that beats numpy's BLAS call on them, and a product large enough for two BLAS threads runs
on the count the thread policy gives (compiler/cpu/runtime/coreshare.py). Both eager matmul
and every compiled plan's product come through here, so they run the same kernels on the
same checks.

What: `matmul` routes one product (the hand-written kernels of compiler/cpu/gemm/:
skinny_gemm, halves, the template's serial entry; batched or claimed parts on sharepool's threads; else
numpy's matmul on the policy's BLAS threads); `matmul_for` decides once what a plan's
product of static shapes calls; `matmul_pair` runs a plan's two independent products at
once; `gemm_thread_count` says what a product ran on (the profiler's column);
`load_gemm_kernels` loads the kernels for a benchmark's set-up. The kernels' modules are
imported at the first product that may use them (`_serial_product`, `_skinny`, `_halves`). The
thread policy's names (its switch, count, ceiling and thresholds) are read from its module
at each call, so the policy's state and a test's change of it hold here too.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .... import envflags
from ..runtime import coreshare

__all__ = ["matmul", "matmul_for", "matmul_pair", "gemm_thread_count", "load_gemm_kernels",
           "FEW_ROWS_T_ANY", "THIN_DEPTH", "THIN_DEPTH_COLUMNS", "SKINNY_MNK", "SKINNY_THIN",
           "SKINNY_DOT_MNK", "HALVES_MNK", "PAIR_MNK", "CLAIM_GEMM_MNK", "BATCH_SPLIT_MAX_MNK"]

# ``x @ w.T`` (w row-major: b F-contiguous, nn.Linear's layout) of few rows is offered to the
# template's serial entry (`_serial_product`: it takes up to `SERIAL_T_MAX_ROWS`) past
# coreshare.FEW_ROWS_GEMM_MNK too: where the policy gives one thread, and up to `FEW_ROWS_T_ANY` rows
# where it gives two.
# OpenBLAS is slow on few-row products of a transposed b. Min / median us, float32, load 3,
# OpenBLAS 2 threads, 1 thread, the kernel on one:
# 8x2048x512 315/361, 567/639, 196/211; 16x1024x1024 362/433, 643/725, 231/249; 32x1024x256
# 129/156, 202/241, 166/199; 48x2048x256 287/327, 457/545, 320/381; 32x4096x512 997/1189,
# 1646/1973, 1292/1548.
FEW_ROWS_T_ANY = 16

# Products of a depth of at most THIN_DEPTH and at least THIN_DEPTH_COLUMNS columns of a
# C-contiguous b, past the ranges above and from SERIAL_MIN_MNK (a convolution of few
# input channels: LeNet's first, 32x10 @ 10x43264 with its bias row), run on the
# template's serial entry (`_serial_product`), in two halves by rows where the policy gives two
# threads and the halves can run (compiler/cpu/gemm/halves.py `thin`), on this thread where it gives one
# or the product is one BLAS thread's anyway (`coreshare.one_thread_always`). BLAS packs the 10-row b into
# panels for a product that is one pass writing its output: 32x10x43264 float32, one
# thread, 0.49-0.51 ms against the kernel's 0.28-0.29 (BLAS on two threads 0.26). Same
# values: the depth is summed in order either way (tests/ops/test_thin_depth_gemm.py).
THIN_DEPTH = 16
THIN_DEPTH_COLUMNS = 4096


def _thin_depth(a, b, threads: int):
    """``a @ b`` for `matmul`'s products of a thin depth (above), or None (numpy's product:
    two BLAS threads where the halves cannot run, or the kernel is not loaded)."""
    if threads > 1:
        return _halves().thin(a, b) if a.shape[0] > a.shape[1] and _halves().two_cores() else None
    return _serial_product(a, b, thin=True)


# Products that run on one thread go to the GEMM template's serial entry
# (compiler/cpu/gemm/template_panels.py: its tiles on this thread, nothing packed, B's rows read
# in place, A's values broadcast where they are, a row-major A or a transposed view) where it
# beats one BLAS thread, which packs both operands at every call. Min us, near-quiet,
# AVX-512, float32 / float64, against one OpenBLAS thread: 64x1000x100 82 / 184 against
# 104 / 250, 32x1024x200 86 / 221 against 122 / 263, 1000x64x100 (a transposed) 80 / 160
# against 83 / 226, 256x128x200 75 / 145 against 87 / 183. It ties or loses on smaller or
# narrower ones, where its call and the column rest weigh more: 64x512x128 60 / 97 against
# 61 / 150, 100x256x64 35 / 68 against 26 / 60. So: at least SERIAL_MIN_MNK multiply-adds,
# SERIAL_MIN_DEPTH of K and SERIAL_MIN_COLUMNS columns (two whole panels of the AVX-512 tile).
SERIAL_MIN_MNK = 1 << 22
SERIAL_MIN_DEPTH = 64
SERIAL_MIN_COLUMNS = 96
# Rows of a between which an F-contiguous b (``x @ w.T``, nn.Linear's layout) runs as
# ``(w @ x.T).T`` (`_serial_transposed`): one OpenBLAS thread is slow on few-row products of a
# transposed b (min us, one thread, float32: 8x1024x512 269 against 111, 16x2048x200 239
# against 129, 48x1000x100 87 against 68); at 64 rows the copy of a.T eats the gain, below 8
# the kernel's columns are narrower than a vector.
SERIAL_T_MIN_ROWS = 8
SERIAL_T_MAX_ROWS = 48
_serial_names = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_serial_loaded: dict = {}   # dtype name -> the loaded serial entry


def _serial_product(a, b, thin: bool = False):
    """``a @ b`` by the template's serial entry (above), or None (run numpy's product): 2-D
    float32 or float64 arrays of one dtype, a C- or F-contiguous, the shape past the bounds
    above, the entry loaded. ``thin``: any depth (`_thin_depth`). (The checks are written
    out: they run at every product that may go there.)"""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    m, kd = a.shape
    n = b.shape[1]
    if (kd < SERIAL_MIN_DEPTH and not thin) or m * kd * n < SERIAL_MIN_MNK:
        return None
    if b.flags.c_contiguous:
        if n < SERIAL_MIN_COLUMNS:
            return None
        transposed = False
    elif b.flags.f_contiguous and SERIAL_T_MIN_ROWS <= m <= SERIAL_T_MAX_ROWS:
        transposed = True
    else:
        return None
    t = _serial_names.get(a.dtype)
    if t is None or b.dtype != a.dtype:
        return None
    if a.flags.c_contiguous:
        af, ars, aks = a.reshape(-1), kd, 1
    elif a.flags.f_contiguous:
        af, ars, aks = a.T.reshape(-1), 1, m
    else:
        return None
    fn = _serial_loaded.get(t)
    if fn is None:
        from . import template_panels
        fn = template_panels.serial_kernel(t).get()
        if fn is None:
            return None
        _serial_loaded[t] = fn
    if transposed:
        return _serial_transposed(fn, a, b, m, kd, n)
    out = np.empty((m, n), a.dtype)
    fn(af, ars, aks, m, kd, b.reshape(-1), n, out.reshape(-1))
    return out


def _serial_transposed(fn, a, b, m, kd, n):
    """``a @ b`` for an F-contiguous b (``x @ w.T``) as ``c.T = w @ a.T``: w's rows read in
    place as the entry's rows, a.T (a copy of the few-row a unless it is a transposed view)
    its columns, c.T copied back C-contiguous (numpy's layout). Packing w.T instead would copy
    all of the weights (16x2048x200 float32: 536 against 94 us)."""
    at = a.T if a.flags.f_contiguous else np.ascontiguousarray(a.T)
    ct = np.empty((n, m), a.dtype)
    fn(b.T.reshape(-1), kd, 1, n, kd, at.reshape(-1), m, ct.reshape(-1))
    return np.ascontiguousarray(ct.T)

# Products of m*k*n from this bound to below HALVES_MNK with a dimension of at most
# SKINNY_THIN (a classifier head's: the MLP step's 256x1024x10, 256x10x1024, 10x256x1024) go
# to compiler/cpu/gemm/skinny_gemm.py first: a dot kernel for few columns of a transposed b, the
# register-tile kernel for a small depth or few rows, each in two GIL-free halves on the
# two cores (compiler/cpu/gemm/halves.py). In the MLP step the three took 0.26 ms against BLAS's
# 0.39-0.40 (breakdown, SCHED_FIFO, policy off). Checked here first: nothing
# is imported below the range.
SKINNY_MNK = 1 << 20
SKINNY_THIN = 16
# A head's logits ``x @ w.T`` (a few columns of a transposed b: the dot kernel) go to
# compiler/cpu/gemm/skinny_gemm.py up to this bound, past HALVES_MNK: the dot kernel reads x once in
# place where BLAS packs it for a product that is one pass over it. The Transformer step's
# head (2048x256x10, 5.2M multiply-adds) alone, SCHED_FIFO, min / median ms: two threads
# 0.155 / 0.161 (BLAS) against 0.081 / 0.091 (the dot halves), caches swept before each
# call 0.304 / 0.376 against 0.184 / 0.233; one thread 0.223 / 0.239 against 0.149 / 0.155.
# The other thin forms keep HALVES_MNK: the weight gradient (few rows) already runs as the
# halves' depth halves from there, and the small-depth input gradient ``g @ w`` (2048x10x256)
# in the tile kernel's row halves was no faster than two BLAS threads (0.079 / 0.083 against
# 0.082 / 0.086 warm, 0.211 / 0.284 against 0.179 / 0.224 swept).
SKINNY_DOT_MNK = 1 << 23


def _skinny():
    global _skinny_module
    if _skinny_module is None:
        from . import skinny_gemm as _skinny_module
    return _skinny_module


_skinny_module = None


# Products of m*k*n from this bound to below FEW_ROWS_GEMM_MNK run as two halves on the
# register-tile kernel, one on this thread and one on OpenBLAS's worker, each a cfunc that
# holds no Python object (compiler/cpu/gemm/halves.py), where the policy gives two threads: the two-layer
# step's forward (64x1000x100, split by its depth: not bitwise the one-thread sum) and weight
# gradient (1000x64x100, split by rows), with its SGD update split by the same halves of the
# weights. 4M: the serial entry's own lower bound (SERIAL_MIN_MNK). The policy's count is asked
# here first: declining inside halves.product cost the compiled step ~10 us under load.
HALVES_MNK = 1 << 22


def _halves():
    global _halves_module
    if _halves_module is None:
        from . import halves as _halves_module
    return _halves_module


_halves_module = None
_halves_asked: set = set()   # numpy dtypes whose halves module `matmul` has asked for


# Two independent products of a compiled plan (compiler/gemm_steps.py pairs them: a layer's
# input and weight gradients) from this many multiply-adds each run at once, each on one BLAS
# thread, one on this thread and one on OpenBLAS's worker (compiler/cpu/gemm/halves.py's `pair`), where the
# policy gives two threads: two one-thread products do not meet at every panel as one
# two-thread product's threads do. The MLP step's 256x1024x1024 pair (layer 2's input and
# weight gradients; SCHED_FIFO, policy off, load 5-10): 3.82-3.91 ms in the step
# against 3.98-4.07 one after the other (six breakdowns each, fresh processes alternating),
# the step's GEMM time 9.32-9.74 (median 9.43) against 9.61-9.88 (9.645), the step -0.20 ms
# (in-process ABBA, 12 rounds, 10 lower). Alone, warm, the pair is no faster than the two
# two-thread products (3.95/4.11 against 3.97/4.07 ms min/median): what it saves is in the
# step. Below 8M (a head's products) the kernels above run them. _pair_at_once(): the switch (tests,
# measurements); `pairs_run` counts the pairs that ran so (the breakdown reads it).
PAIR_MNK = 1 << 23
_pair_at_once = envflags.flag("TRACEJIT_PAIR_AT_ONCE")   # (the switch: tests, A/B measurements)
pairs_run = 0


def matmul(a: np.ndarray, b: np.ndarray, blas_only: bool = False) -> np.ndarray:
    """``numpy.matmul(a, b)`` on the BLAS threads `adapt` and `blas_threads_for` choose: the
    call a compiled plan makes for each product (a GEMM is split like a kernel, and waits
    for a thread stuck behind another process the same way). ``blas_only``: adapt BLAS's
    count only (`adapt_blas`; eager matmul). A product below `coreshare.TINY_GEMM_MNK` skips the
    adaptation: BLAS keeps it on one thread whatever the count, `matmul` leaves the count
    alone for it, and a larger product (or parallel kernel) adapts before it runs; so the
    small products of an eager step cost numpy's call alone (the sampling cost 0.85 us a
    product on top of np.matmul's 0.9 for 4x4)."""
    if a.ndim >= 2 and b.ndim >= 2:
        sa = a.shape
        m, k, n = sa[-2], sa[-1], b.shape[-1]
        mnk = m * k * n
        if mnk < coreshare.TINY_GEMM_MNK:
            return np.matmul(a, b)
        if mnk >= coreshare.FEW_ROWS_GEMM_MNK and m >= coreshare.FEW_ROWS and k > THIN_DEPTH:
            # A large product (a layer's: the MLP step's forward products and its last weight
            # gradient): none of the kernels below takes it (a thin depth goes on to
            # `_thin_depth`), BLAS runs it on the policy's threads. Decided here in three
            # comparisons: the checks below, run for it on caches
            # the previous product or kernel had swept, took ~1 us of each such call in the
            # step (5.2-7.0 us of Python a call before, 4.3-5.7 after).
            threads = coreshare.adapt_blas() if blas_only else coreshare.adapt()
            if threads == 1 and _claim_gemms() and mnk >= CLAIM_GEMM_MNK and (coreshare.blas_ceiling() or 1) >= 2:
                out = _claimed(a, b)   # the policy gives one thread: a partner that may be late
                if out is not None:
                    return out
            return np.matmul(a, b)
        single = coreshare.one_thread_always(m, k, n)
        if SKINNY_MNK <= m * k * n < SKINNY_DOT_MNK and min(m, k, n) <= SKINNY_THIN:
            out = _skinny().product(a, b)   # a head's product: one thread, nothing packed
            if out is not None:
                return out
        if HALVES_MNK <= m * k * n < coreshare.FEW_ROWS_GEMM_MNK:
            if not coreshare.ENABLED or coreshare.core_share.threads() > 1:
                out = _halves().product(a, b)   # two GIL-free halves where two cores are free
                if out is not None:
                    return out
            elif a.dtype not in _halves_asked:   # (their module asked for now, once per
                _halves_asked.add(a.dtype)         # dtype: loaded when two cores are free)
                _halves().expect(a.dtype)
        if single:   # one thread whatever the policy: the register-tile kernel
            out = _serial_product(a, b)
            if out is not None:
                return out
        threads = coreshare.adapt_blas() if blas_only else coreshare.adapt()
        if k <= THIN_DEPTH and n >= THIN_DEPTH_COLUMNS and b.flags.c_contiguous:
            out = _thin_depth(a, b, 1 if single else threads)
            if out is not None:
                return out
        if threads == 1 and not single and m * k * n < coreshare.FEW_ROWS_GEMM_MNK:
            out = _serial_product(a, b)   # one thread because the policy gives one
            if out is not None:
                return out
        elif not single and m < coreshare.FEW_ROWS and (threads == 1 or m <= FEW_ROWS_T_ANY) and b.flags.f_contiguous:
            out = _serial_product(a, b)   # x @ w.T of few rows, past FEW_ROWS_GEMM_MNK
            if out is not None:
                return out
        if _splits(a, b, m * k * n):
            return _batched(a, b)
        if threads == 1 and _claim_gemms() and m * k * n >= CLAIM_GEMM_MNK and (coreshare.blas_ceiling() or 1) >= 2:
            out = _claimed(a, b)   # the policy gives one thread: a partner that may be late
            if out is not None:
                return out
        if threads and coreshare.set_to_one(m, k, n):
            coreshare.blas_count_one()
            try:
                return np.matmul(a, b)
            finally:
                coreshare.blas_count_back()
        return np.matmul(a, b)
    coreshare.adapt_blas() if blas_only else coreshare.adapt()   # a vector operand: its count as it is
    return np.matmul(a, b)


# Products from this m*k*n on run as parts of rows claimed by this thread and sharepool's
# partner thread where the policy gives BLAS one thread but its ceiling is two or more
# (`sharepool.claimed_matmul`: the partner does as many parts as it gets a core for, and
# is not waited for when it got none). _claim_gemms(): the switch (tests, measurements).
CLAIM_GEMM_MNK = 1 << 25
_claim_gemms = envflags.flag("TRACEJIT_CLAIM_GEMMS")   # (the switch: tests, A/B measurements)
def _claimed(a, b):
    if coreshare.ceding():
        return None
    from ..runtime import sharepool
    return sharepool.claimed_matmul(a, b) if sharepool.partner.punctual() else None


def matmul_for(m: int, k: int, n: int, dtype) -> Callable[..., np.ndarray]:
    """The callable a compiled plan makes its (m, k) @ (k, n) product of `dtype` with,
    shapes known when the plan is built: `matmul`'s route decided once where the shapes
    alone decide it. A product below `coreshare.TINY_GEMM_MNK` is numpy's matmul itself (`matmul`
    returns ``np.matmul(a, b)`` for it after three comparisons: 0.3-1.3 us of the two-layer
    step's three small products on swept caches); one in the halves' range that no
    skinny kernel takes is compiler/cpu/gemm/halves.py's `plan_product` (the halves' launch with only
    the checks a call can change, `matmul` itself for anything else); every other
    product `matmul`. The results are `matmul`'s: the same kernels on the same checks."""
    mnk = m * k * n
    if mnk < coreshare.TINY_GEMM_MNK:
        return np.matmul
    if (HALVES_MNK <= mnk < coreshare.FEW_ROWS_GEMM_MNK
            and not (SKINNY_MNK <= mnk < SKINNY_DOT_MNK and min(m, k, n) <= SKINNY_THIN)):
        return _halves().plan_product(m, k, n, dtype, matmul)
    return matmul


def matmul_pair(a1: np.ndarray, b1: np.ndarray, a2: np.ndarray, b2: np.ndarray) -> tuple:
    """``(matmul(a1, b1), matmul(a2, b2))`` for a plan's two independent products: at once
    on the two cores where both are 2-D of `PAIR_MNK` multiply-adds or more and halves.pair
    can run them (its conditions: two cores free, numpy's BLAS an ILP64 OpenBLAS, the
    module loaded), else one after the other."""
    global pairs_run
    if (_pair_at_once() and a1.ndim == 2 and b1.ndim == 2 and a2.ndim == 2 and b2.ndim == 2
            and a1.shape[0] * a1.shape[1] * b1.shape[1] >= PAIR_MNK
            and a2.shape[0] * a2.shape[1] * b2.shape[1] >= PAIR_MNK
            and (not coreshare.ENABLED or coreshare.core_share.threads() > 1)):
        out = _halves().pair(a1, b1, a2, b2)
        if out is not None:
            pairs_run += 1
            return out
    return matmul(a1, b1), matmul(a2, b2)


def load_gemm_kernels(dtype: str = "float32") -> bool:
    """Load (compiling into the disk cache where it does not hold them yet) the hand-written
    kernels `matmul` routes products to: the template's serial entry, the halves, skinny_gemm's. Sync mode
    (``TRACEJIT_COMPILE=sync``, the benchmarks) only loads them from disk and never compiles
    them in a call, so on an empty cache a steady-state measurement ran the MLP step's head
    products on BLAS (0.44-0.47 ms of the step against 0.30) unless an earlier
    process had put them there; background mode compiles them in its workers anyway.
    For a benchmark's set-up (bench/breakdown.py, the compiled runner), not the op path.
    True when all three loaded."""
    from . import halves
    from . import skinny_gemm
    from . import template
    from . import template_panels
    loaded = [template.kernel_for(dtype, c).load_now() for c in template.CONFIGS]
    loaded.append(template_panels.serial_kernel(dtype).load_now())
    return all([module.module_kernel(dtype).load_now() for module in (halves, skinny_gemm)] + loaded)


# Products of m*k*n from which a batch of them stays on BLAS's own threads (each product
# big enough for its threads to pay) rather than being split by batch (`_batched`).
BATCH_SPLIT_MAX_MNK = 1 << 22


def _splits(a, b, mnk: int) -> bool:
    """Whether a batched product (same leading dims, float, each product small) runs split
    by batch over the cores (`_batched`) instead of numpy's one product at a time."""
    return (a.ndim >= 3 and a.ndim == b.ndim and a.shape[0] > 1 and mnk < BATCH_SPLIT_MAX_MNK
            and a.shape[:-2] == b.shape[:-2] and a.dtype == b.dtype and a.dtype.kind == "f"
            and a.dtype.itemsize in (4, 8))


def _batched(a, b):
    """``a @ b`` for a batch of products each too small for BLAS's threads to pay (numpy
    makes one BLAS call per product, and two BLAS threads meet at every call: attention's
    16 x 4 products of 128x64 @ 64x128 ran no faster on two threads than on one): the batch
    split over the pool's threads by its first axis, each part on one BLAS thread
    (tracejit/compiler/cpu/runtime/sharepool.py); at once where the machine gives one core."""
    from ..runtime import sharepool
    out = np.empty(a.shape[:-1] + (b.shape[-1],), a.dtype)

    def part(lo, hi):
        np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi])
    work = out.size * a.shape[-1]
    sharepool.split(part, a.shape[0], work)
    return out


def gemm_thread_count(m: int, k: int, n: int) -> int | None:
    """The BLAS threads `matmul` gives an (m, k) @ (k, n) product at this moment (as set by
    the last `adapt`): what a profiler records beside the product's time (bench/breakdown.py),
    since a step's GEMMs run at about half speed when the policy has given a core away. None
    where no known BLAS is loaded."""
    if coreshare.one_thread_now(m, k, n):
        return 1
    mnk = m * k * n
    if (SKINNY_MNK <= mnk < SKINNY_DOT_MNK and min(m, k, n) <= SKINNY_THIN
            and (mnk < HALVES_MNK or n <= SKINNY_THIN)   # (past HALVES_MNK: the dot kernel's only)
            and _skinny_module is not None and _skinny_module.on()):
        t = _skinny_module.threads(m, k, n)
        if t is not None:
            return t
    from ....threads import blas_threads
    return blas_threads()
