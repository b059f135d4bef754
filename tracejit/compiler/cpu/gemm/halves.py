"""Products in two halves on two cores, each half a numba cfunc: no Python object and no
GIL on either thread; and the halves' module, loading and launch, which the elementwise
halves (compiler/cpu/gemm/elementwise_halves.py) share.

Why: the two-layer step (64x1000 -> 100 -> 10, SGD by hand) spends its time on w1's path:
the forward product ``x @ w1`` (64x1000x100), the weight gradient ``x.T @ g`` (1000x64x100)
and the update ``w1 -= lr * g1`` (two 100K-element ops). On one core each is at its floor
(the register-tile kernel at its FMA bound, the update at numpy's speed); PyTorch's MKL runs
both products on two spinning threads. A second share used to cost 40-80 us a launch on the
2-vCPU VM (a numba OpenMP launch, a Python callback on OpenBLAS's worker, nogil numba calls
handing the GIL back and forth), more than the half of a 10-60 us phase it
saves. OpenBLAS's ``gotoblas_pthread`` running a C function on its worker costs 1.4 us back
to back or after 60 us of Python, 3-10 us right after a two-thread product,
because nothing on either thread takes the GIL.

And the halves must stay on their cores: a phase split over two threads is slower when the
previous phase wrote its data on the other core (the lines move first). So all three phases
split w1 the same way, by its rows (its flat halves, being C-contiguous), the first half on
the calling thread and the second on OpenBLAS's worker, every time:

- ``x @ w1`` of few rows (`FEW_ROWS`): split by the depth K (w1's rows), the second half's
  partial product added to the first's. **The sum order changes**: results differ from the
  one-thread product in the last bits (as BLAS's thread counts make them differ);
- ``x.T @ g``: split by the result's rows (w1's rows), each element computed as the
  one-thread kernel computes it: bitwise the same;
- ``a + b``, ``a - b``, ``a * b``, ``a / b`` (arrays of one shape or a scalar, float32 or
  float64), within `WARM_S` of a product's halves (the worker still spinning): by flat
  halves, IEEE operations: bitwise numpy's (compiler/cpu/gemm/elementwise_halves.py, on
  this module's launch and loaded pairs).

``python -m bench --only mlp2``, main's tree and this one alternating, two threads forced
(TRACEJIT_ADAPTIVE_THREADS=0) under SCHED_FIFO (a quiet machine emulated; load 8),
medians: eager 371-376 -> 335-340 us, compiled 253-258 -> 213-216; PyTorch eager 291-295.

``pair`` runs two whole products at once, one per core, each one call of numpy's BLAS GEMM
on one thread (a cfunc calling cblas by address, compiler/cpu/runtime/voidptr.py): a compiled plan's
independent products (compiler/gemm_steps.py, router.matmul_pair decides which).

When: products from `MIN_MNK` (the register-tile kernel's lower bound) to below
coreshare's FEW_ROWS_GEMM_MNK, elementwise ops from elementwise_halves' `EW_MIN_ELEMENTS`, where the pool gives
two threads (`sharepool.pool_threads`), BLAS's ceiling is two or more, numpy's BLAS is a
pthreads OpenBLAS with a pool of two (`sharepool.blas_worker`), no other launch holds the
pool, and the module is loaded (as the serial entry: from the disk cache in sync mode,
compiled by the workers in background mode). Otherwise None: the caller's path runs.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..runtime import coreshare
from ..runtime import sharepool
from . import router, template_panels
from ..kernels.loader import kernel as _kernel
from .... import envflags
from ....threads import blas_count_lock as _blas_count

__all__ = ["product", "plan_product", "thin", "pair", "launch", "two_cores", "warm", "expect", "source",
           "module_kernel", "loaded_module", "MIN_MNK", "WARM_S"]

# Products below this run on one thread (the halves' launch and the add of the partial
# product are a few us); the register-tile kernel's own bound.
MIN_MNK = router.SERIAL_MIN_MNK
# The switch (tests and measurements turn it off to compare).
on = envflags.flag("TRACEJIT_GEMM_HALVES")   # (the switch: tests, A/B measurements)
# Elementwise halves run only this soon after the end of a launch of halves (a product's):
# OpenBLAS's worker spins ~0.4 ms after a job (threads.BLAS_THREAD_TIMEOUT), then sleeps, and
# waking it cost a 100K-element ``w -= lr * g`` 159/1130 us (min/median) against numpy's
# 65/103 after 1 ms idle (load 9.5, policy forced to two threads). In the step the update
# follows the weight gradient's halves at once, on the halves those placed on each core.
WARM_S = 2.5e-4
_warm_until = 0.0

# The numba source of the halves (records, launches, cfunc entries): halves_source.py
from .halves_source import PAIR_SOURCE as _PAIR  # noqa: E402


# `ew_half`'s loops in the order of its table (`_Pair.ew_loops`, at the records' slot 14)
EW_LOOPS = ("_ew_arrays", "_ew_into_a", "_ew_into_b", "_ew_scalar_right", "_ew_scalar_right_into",
            "_ew_scalar_left", "_ew_scalar_left_into")


def source(dtype: str) -> str:
    """The halves module for `dtype`: the two half entries and their record fillers (`_PAIR`),
    with the template's compiled serial entry (`template_panels.serial_import`: loaded, or
    compiled in place where its disk entry is missing), which `gemm_half` calls by address."""
    gemm = "call_sgemm" if dtype == "float32" else "call_dgemm"
    head = "import numpy as np\nfrom numba import njit\n" + template_panels.serial_import(dtype) + _ENTRY
    return head + _PAIR.replace("{t}", dtype).replace("{g}", gemm)


# The module's `kernel`, the name compiler/cpu/kernels/loader.py loads (`loaded_module` reads the halves' entries
# from its globals): the serial entry, called through this module.
_ENTRY = """

def kernel(*args):
    gemm_kernel(*args)
"""


class _Pair:
    """One dtype's loaded entries and the two records a launch hands gotoblas_pthread."""

    __slots__ = ("keep", "recs", "pthread", "gemm_launch", "gemm_entry", "gemm_address", "pair_launch",
                 "whole_address", "ew_launch", "ew_entry", "ew_address", "count_get", "count_set", "ew_loops")

    def __init__(self, module: dict):
        import ctypes
        # their code lives as long as this
        self.keep = (module["gemm_half"], module["ew_half"], module["product_whole"])
        self.recs = np.zeros((2, 16), np.int64)
        from ..runtime.voidptr import native_address
        self.recs[:, 15] = native_address(module["gemm_kernel"])   # (`gemm_half` calls it there)
        self.ew_loops = np.array([native_address(module[name]) for name in EW_LOOPS], np.int64)
        self.recs[:, 14] = self.ew_loops.ctypes.data                 # (`ew_half` reads the table there)
        self.ew_launch = module["ew_launch"]
        self.ew_entry = _entry_point(self.ew_launch)
        self.ew_address = module["ew_half"].address
        # gotoblas_pthread's address (`ew_launch` and `pair_launch` call it), 0 where none
        # was found (tests put a runner of their own here); looked up first where no one
        # has yet (a pair loaded before any launch asked the machine)
        sharepool.blas_worker.find()
        fn = sharepool.blas_worker.fn
        self.pthread = ctypes.cast(fn, ctypes.c_void_p).value or 0 if fn is not None else 0
        self.pair_launch = module["pair_launch"]
        self.gemm_launch = module["gemm_launch"]
        self.gemm_entry = _entry_point(self.gemm_launch)
        self.gemm_address = module["gemm_half"].address
        self.whole_address = module["product_whole"].address
        # BLAS's thread count's getter and setter (`pair_launch` calls them), 0 where none
        from ....threads import _blas_getset
        getset = _blas_getset()
        self.count_get, self.count_set = ((ctypes.cast(getset[0], ctypes.c_void_p).value,
                                           ctypes.cast(getset[1], ctypes.c_void_p).value)
                                          if getset is not None else (0, 0))


def _entry_point(dispatcher):
    """The compiled entry of a dispatcher with one explicit signature (``ew_launch``,
    ``gemm_launch``): a call
    unboxes the arguments as that signature says, without the dispatcher's typing of each
    (~0.4 us of a ten-argument launch); the dispatcher itself where there is no such entry.
    Callers pass exactly the signature's types (elementwise_halves' `plan_calls`,
    `plan_product` check them)."""
    overloads = getattr(dispatcher, "overloads", None)
    if overloads is not None and len(overloads) == 1:
        entry = getattr(next(iter(overloads.values())), "entry_point", None)
        if callable(entry):
            return entry
    return dispatcher


_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_pairs: dict = {}     # dtype name -> _Pair, or None where it cannot load


def two_cores() -> bool:
    """Whether two halves may run now: the switch on, two threads by the policy and the
    pool, BLAS's ceiling two or more, OpenBLAS's worker found (compiler/cpu/gemm/skinny_gemm.py's dot
    halves ask it too)."""
    if not on():
        return False
    if coreshare.ENABLED and coreshare.core_share.threads() < 2:
        return False         # (the policy's count: the cheap answer under load)
    return sharepool.pool_threads() >= 2 and _blas_pair()


def _blas_pair() -> bool:
    """What the machine must give for halves to run at all: BLAS's ceiling two or more
    and OpenBLAS's worker found (`two_cores` now; `expect` ever)."""
    return (coreshare.blas_ceiling() or 1) >= 2 and sharepool.blas_worker.find() is not None


def kernel_of(key: tuple, make_source: Callable[[], str], later: bool = False):
    """The `loader.NativeKernel` of a hand-written kernel module with GIL-free halves
    (loaded from disk only in sync mode: ``sync_compiles=False``; `later`: rank LATER)."""
    return _kernel(key, make_source, sync_compiles=False, later=later)


def module_kernel(t: str):
    """The `loader.NativeKernel` of dtype name `t`'s halves module, compiled by the
    workers at rank LATER (after every other kernel an op or a plan asked for): its compile
    is the dearest of all (3.1-3.3 s of a worker's CPU) and few steps gain much from it.
    Compiled steps, sync mode, warm, policy at two threads, halves on/off alternating in one
    process, min/median: two-layer step (4 launches a step) 0.2/0.2 against
    0.3/0.8 ms (load 4-5); with the product pairs (compiler/gemm_steps.py; load 10-12, medians
    meaningless) MLP (4) min 11.8-12.0 against 12.1-12.6, Transformer (4) min 47.2-47.9
    against 47.7-48.0; CNN and LSTM none. Asked for at EAGER, it went ahead of the
    attention kernels the compiled Transformer step waits for whenever the policy gave two
    threads early (3.3 s later to full speed in 2 of 4 cold runs, tier21b). Asked for at
    every call once the policy gives two threads (a quiet machine, as soon as the workers
    go idle): queued behind the eager kernels put back held, it is taken from behind them
    (workers.CompilePool._take_runnable: it once waited 60 s for an idle core), and starts
    once the queue has settled (workers.LATER_SETTLE_S), after a kernel the step asks for a
    step later."""
    return kernel_of(("rows_gemm_halves", t), lambda: source(t), later=True)


def loaded_module(kernel) -> tuple | None:
    """(kernel, its module's globals: the halves' cfuncs and records) of a hand-written
    kernel module (`kernel`: its `loader.NativeKernel`) once loaded (compiler/cpu/kernels/loader.py's
    policy; in sync mode only from the disk cache), else None."""
    fn = kernel.get()
    if fn is None:
        return None
    # (a numba dispatcher's function's globals, or a plain function's: the halves module's
    # `kernel`)
    return fn, getattr(getattr(fn, "py_func", fn), "__globals__", {})


def _pair(dtype):
    """The dtype's `_Pair` where two halves may run now, else None."""
    t = _NAMES.get(dtype)
    if t is None:
        return None
    if not two_cores():
        if t not in _expected:
            expect(dtype)   # (skinny_gemm's head gradients come here under one thread too)
        return None
    p = _pairs.get(t)
    if p is None:
        got = loaded_module(module_kernel(t))
        g = got[1] if got is not None else {}
        if not all(name in g for name in ("gemm_half", "ew_half", "gemm_records", "ew_records",
                                          "product_whole", "product_record", "ew_launch", "pair_launch",
                                          "gemm_launch")):
            return None
        p = _pairs[t] = _Pair(g)
    return p


def expect(dtype: np.dtype) -> None:
    """Ask for `dtype`'s halves module now, from a product in the halves' range that the
    policy keeps on one thread (router.matmul; `_pair` for skinny_gemm's `thin`
    products), so that it is loaded by the time the
    policy gives two: in background mode this records the ask (`NativeKernel.get`), which
    kernels/vectorized.settle then loads and waits for; nothing loads in the call. Without it
    the module was first asked for at the first two-thread product, and loaded a second
    (`loader._GO_AFTER_S`) and a load after that: where the policy read one thread over a
    process's import and first step and two after (a quiet machine once the set-up's
    other processes are done), the bench's two-layer eager step ran its timed steps on the
    one-thread kernel, 0.6-0.8 s after `settle`: ~380 us median instead of ~300. Once per
    dtype; nothing in sync mode (the first two-thread call loads it there, as before)."""
    t = _NAMES.get(dtype)
    if t is None or t in _pairs or t in _expected:
        return
    _expected.add(t)
    from ..kernels import loader
    if (on() and loader.enabled() and not loader._sync_mode()
            and coreshare.core_share.cpus >= 2 and _blas_pair()):   # (halves could ever run here)
        module_kernel(t).get()


_expected: set = set()   # dtype names `expect` has asked for


def warm() -> bool:
    """Whether elementwise halves may run now (within WARM_S of a launch)."""
    return time.perf_counter() <= _warm_until


def launch(p, fill: Callable, *args) -> bool:
    """``fill(p.recs, *args)``: a numba launcher (`gemm_launch`, `pair_launch`, `ew_launch`,
    skinny_gemm's `dot_launch`) that writes records 0 and 1 and runs them at once, on this
    thread and on OpenBLAS's worker (the halves call no BLAS). `p`: a `_Pair` or any object
    with its ``recs`` (2 x 16 int64). The records are written only once this thread holds
    the pool (another Python thread launching meanwhile would overwrite them); False where
    another launch holds it (nothing ran)."""
    if not sharepool.try_launch():
        return False
    global _warm_until
    try:
        fill(p.recs, *args)
    finally:
        sharepool.end_launch()
    _warm_until = time.perf_counter() + WARM_S
    return True


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` in two halves (module docstring), or None: 2-D float32/float64 numpy
    arrays of one dtype, a C- or F-contiguous, b C-contiguous, the register-tile kernel's
    shapes (depth and columns), `MIN_MNK` multiply-adds or more."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    m, kd = a.shape
    n = b.shape[1]
    if not b.flags.c_contiguous or a.dtype != b.dtype or a.dtype not in _NAMES or b.shape[0] != kd:
        return None
    by_rows = _by_rows(m, kd, n)
    return None if by_rows is None else _gemm(a, b, by_rows)


def _by_rows(m: int, kd: int, n: int):
    """How `product` splits an (m, kd) @ (kd, n) product: True by rows, False by depth (few
    rows), or None where it does not take these shapes (under `MIN_MNK`, the register-tile
    kernel's least columns or depth)."""
    if m * kd * n < MIN_MNK or n < router.SERIAL_MIN_COLUMNS:
        return None
    few = m < coreshare.FEW_ROWS
    if (kd < 2 * router.SERIAL_MIN_DEPTH) if few else (kd < router.SERIAL_MIN_DEPTH or m < 16):
        return None
    return not few


def plan_product(m: int, kd: int, n: int, dtype, general: Callable) -> Callable:
    """A compiled plan's ``a @ b`` of static shapes (m, kd) @ (kd, n) of `dtype` as the
    halves' launch with only the checks a call can change: a callable ``call(a, b)``, or
    `general` itself where `product` would never take these shapes (then the plan calls
    `general`, router.matmul, as before).

    The plan's product went router.matmul -> `product` -> `_gemm` -> `_pair` ->
    `two_cores` -> `_blas_pair` -> blas_ceiling, two np.empty, `launch`, and the dispatcher
    typed `gemm_launch`'s eight arguments: ~4.5 us of Python a product in the two-layer
    step (each line there runs on caches the previous product swept). Here what the shapes
    and dtype decide (the range, the kernel's depth and columns, rows or depth halves) is
    decided once; a call checks the switch, the policy's count, the pool, the loaded pair,
    the operands' types, dtypes, shapes and layout, BLAS's ceiling and OpenBLAS's worker,
    then runs the same launch (the same records and halves: bitwise `product`'s result)
    through `gemm_launch`'s compiled entry. Anything else goes to `general(a, b)`, which
    answers exactly as before (it loads the pair, asks for the module under one thread,
    takes another kernel). Module state is read at each call: tests and the policy change
    it under a plan."""
    dt = np.dtype(dtype)
    t = _NAMES.get(dt)
    by_rows = _by_rows(m, kd, n)
    if t is None or by_rows is None:
        return general
    sa, sb, so = (m, kd), (kd, n), (m, n)
    ndarray = np.ndarray
    empty = np.empty
    perf_counter = time.perf_counter
    share = coreshare

    def call(a, b):
        # router.matmul's test for the halves (`not on() or threads() > 1`), then
        # `two_cores`' and `_gemm`'s, in one expression each (written out: no helper frames)
        global _warm_until
        if (type(a) is ndarray and type(b) is ndarray and on()
                and (not share.ENABLED or share.core_share.threads() > 1)
                and sharepool.pool_threads() >= 2):
            p = _pairs.get(t)
            if (p is not None and p.pthread and a.dtype is dt and b.dtype is dt
                    and a.shape == sa and b.shape == sb):
                fa = a.flags
                if ((fa.c_contiguous or fa.f_contiguous) and b.flags.c_contiguous
                        and (share.blas_ceiling() or 1) >= 2 and sharepool.blas_worker.find() is not None):
                    out = empty(so, dt)
                    rest = out if by_rows else empty(so, dt)
                    if sharepool.try_launch():      # (read here: a fork makes a new lock)
                        try:
                            p.gemm_entry(p.recs, a, b, out, rest, by_rows, p.pthread, p.gemm_address)
                        finally:
                            sharepool.end_launch()
                        _warm_until = perf_counter() + WARM_S
                        return out
        return general(a, b)

    return call


def thin(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` for compiler/cpu/gemm/skinny_gemm.py's products of a small depth or few rows (a head's
    input and weight gradients, which it bounds) in two halves, or None: by rows where a
    has more rows than its depth, else by depth (the partial products added: not bitwise
    the one-thread sum). 2-D float32/float64 numpy arrays of one dtype, a C- or
    F-contiguous, b C-contiguous."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    if (not b.flags.c_contiguous or a.dtype != b.dtype or a.dtype not in _NAMES
            or b.shape[0] != a.shape[1]):
        return None
    return _gemm(a, b, a.shape[0] > a.shape[1])


def _gemm(a, b, by_rows: bool):
    """The product's two halves by rows or by depth (`gemm_records`), or None."""
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        return None
    p = _pair(a.dtype)
    if p is None or not p.pthread:   # (no gotoblas_pthread to call: never jump to address 0)
        return None
    m, n = a.shape[0], b.shape[1]
    out = np.empty((m, n), a.dtype)
    rest = out if by_rows else np.empty((m, n), a.dtype)
    if not launch(p, p.gemm_launch, a, b, out, rest, by_rows, p.pthread, p.gemm_address):
        return None
    return out   # (depth halves: `gemm_launch` added the second's partial product)


def pair(a1: np.ndarray, b1: np.ndarray, a2: np.ndarray, b2: np.ndarray) -> tuple | None:
    """``(a1 @ b1, a2 @ b2)`` at once, each product one call of numpy's BLAS GEMM on one
    thread, the first on this thread and the second on OpenBLAS's worker (BLAS's count set
    to one around them, so that neither call wakes the pool: its worker runs the other), or
    None: 2-D numpy arrays of one dtype (float32 or float64), each operand C- or
    F-contiguous, numpy's BLAS an ILP64 OpenBLAS (its cblas GEMM called by address with
    64-bit integers), two cores free (`two_cores`), the module loaded. Each result is the
    one-thread BLAS product's (which may differ in the last bits from the two-thread one,
    as BLAS's thread counts do). router.matmul_pair decides which pairs come here.

    The launch is one call of the module's `pair_launch` (count, records, both products,
    count back; the GIL released), and each operand's layout is read once here: this runs
    right after a product or row kernel has swept the caches, where each line of Python
    costs several times its warm cost (the layer-2 pair of the MLP step spent
    ~40 us outside its two GEMMs with the count set by ctypes around `launch`)."""
    dt = a1.dtype
    trans = []
    for x in (a1, b1, a2, b2):
        if type(x) is not np.ndarray or x.ndim != 2 or x.dtype != dt:
            return None
        flags = x.flags
        if flags.c_contiguous:
            trans.append(0)
        elif flags.f_contiguous:
            trans.append(1)       # BLAS takes it transposed
        else:
            return None
    if a1.shape[1] != b1.shape[0] or a2.shape[1] != b2.shape[0]:
        return None
    fn = _gemm_function(dt)
    if fn is None:
        return None
    p = _pair(dt)
    if p is None or not p.pthread:   # (no gotoblas_pthread to call: never jump to address 0)
        return None
    c1 = np.empty((a1.shape[0], b1.shape[1]), dt)
    c2 = np.empty((a2.shape[0], b2.shape[1]), dt)
    # BLAS's count stays one until both products end: a change from another thread meanwhile
    # sent the worker's product to BLAS's pool, which the launching thread's product held
    # (a hang; threads.blas_count_lock). Another thread changing it now: one after the other.
    if not _blas_count.acquire(blocking=False):
        return None
    try:
        ran = launch(p, p.pair_launch, fn, p.pthread, p.whole_address, p.count_get, p.count_set,
                     trans[0], trans[1], a1, b1, c1, trans[2], trans[3], a2, b2, c2)
    finally:
        _blas_count.release()
    return (c1, c2) if ran else None


_gemm_functions: dict = {}   # dtype -> cblas GEMM's address (ILP64 only), or None


def _gemm_function(dtype):
    """numpy's BLAS GEMM for `dtype` where it takes 64-bit integers (the share's
    `call_sgemm`/`call_dgemm` pass them), else None."""
    if dtype not in _gemm_functions:
        from .blas_gemm import gemm_address
        t = _NAMES.get(dtype)
        found = gemm_address(t) if t is not None else None
        _gemm_functions[dtype] = found[0] if found is not None and found[1] == 64 else None
    return _gemm_functions[dtype]
