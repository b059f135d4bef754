"""Large eager elementwise ops through numba kernels made from the op's own record.

numpy runs each elementwise op on one core (float32 ``erf`` as ~30 array passes); PyTorch
runs them threaded and vectorized. So an eager elementwise op over ``MIN_ELEMENTS`` or more
runs a kernel made from the primitive's ``scalar`` rule by the compiler's one lowering: the
op as a fused group of one equation (`loopnest.lower_op`) rendered by the CPU backend,
exactly as a compiled group. There is no second kernel generator here. The parallel
variant runs through `coreshare.guard_parallel`; smaller sizes run the serial twin.

The first call must not pay a compile or numba's import: a kernel is used only once it is
*loaded*, in background mode by a thread of its own (`_Preparation`) that loads it from
disk or has the compile workers build it; calls use numpy until then. ``TRACEJIT_CACHE=0``
keeps eager on numpy, ``TRACEJIT_COMPILE=sync`` loads a kernel on disk in the call and
compiles nothing, ``TRACEJIT_EAGER_KERNELS=0`` turns the kernels off.

Which ops run here (`_gains_on_one_core`, answered without importing the compiler): math
functions and selects from ``MIN_ELEMENTS``; arithmetic and comparisons, at memory speed
in numpy already, from ``ARITH_MIN_ELEMENTS`` (or ``PAIR_ARITH_MIN_ELEMENTS`` through a
GIL-free pair). Arithmetic results are bitwise numpy's; math functions may differ in the
last bits.

An op on bf16 words (ops/bf16_eager.py) runs as one kernel that widens its operands on
load, computes in float32 and rounds on store: the float32 op's values rounded once, in
one pass where numpy takes three. Arithmetic and selects (bitwise numpy's) run so from
``WORDS_MIN_ELEMENTS``, math functions from the sizes a float32 op runs here.
"""
from __future__ import annotations

import math
import os
import threading
import time
import numpy as np

from ..runtime import coreshare, sharepool
from .... import bf16 as _bf16
from ....threads import PARALLEL_MIN, usable_cpus
from ....ops.elementwise import ADD
from ....ops.impls import TIER0_THREADS, outside, serving_tier0, standin, standing_in  # noqa: F401  (the ask's context)
from ....ops.shape import COPY
from . import loader

__all__ = ["MIN_ELEMENTS", "MANY_PASS_MIN_ELEMENTS", "ARITH_MIN_ELEMENTS", "PAIR_ARITH_MIN_ELEMENTS", "WORDS_MIN_ELEMENTS", "add_into",
           "copy_of", "eligible", "run", "settle", "stats"]

# Below this many output elements the kernel call and dispatch cost more than they save.
MIN_ELEMENTS = 1 << 15
# ... but an op whose numpy form makes several array passes (the record's
# ``extra["passes"]``, 3 or more: sigmoid, SiLU, softplus, ELU, hardswish and their
# gradients) gains from one pass from here: SiLU over 2048 float32, ~2x numpy's time.
MANY_PASS_MIN_ELEMENTS = 1 << 11
# Arithmetic gains only from the second core (numpy's loop is at one core's memory speed):
# `x * 1.001` float32 over 4M, 2.7-3.3 vs 4.2 ms.
ARITH_MIN_ELEMENTS = 1 << 20
# Arithmetic from here where a parallel flat kernel has a GIL-free pair, right after a
# two-thread job (sharepool.warm): both cores then hold the product's lines, and an update
# one core alone writes pays for every line the other read (``w1 -= t``, 100K float32:
# 65-75 us against 9); elsewhere the pair lost to numpy's loop.
PAIR_ARITH_MIN_ELEMENTS = 1 << 16
# Math functions numpy has no ufunc for (float32 erf: ~30 passes, ops/_special.py): a rule
# calling one runs as a kernel from the first element (exact GELU, 512 float32: ~8x faster).
_MANY_PASS_FUNCTIONS = frozenset(("erf", "erfc"))
# bf16 words from here: numpy's widen, op and rounding are three passes and the rounding
# alone ~8 numpy calls (bf16.to_bfloat16)
WORDS_MIN_ELEMENTS = 1 << 12

# Output dtypes an eligible op may have (a filter: the renderer spells every type itself).
_OUT_DTYPES = ("float32", "float64", "bool", "bfloat16")
_FLOAT_NAMES = ("float32", "float64")
_SMALL_INT_POWERS = frozenset(float(v) for v in range(-4, 5))

_lock = threading.Lock()
_start_lock = threading.Lock()
_entries: dict = {}   # kernel key -> _Entry
_stats = {"launches": 0, "submitted": 0, "loaded": 0, "unsupported": 0, "failed": 0}


class _Entry:
    __slots__ = ("fn", "job", "spec", "failed", "checked")

    def __init__(self, spec):
        self.spec = spec          # codegen_cpu.KernelSpec (.source, .llvm_options), or None
        self.fn = None
        self.job = None
        self.failed = spec is None
        self.checked = -math.inf  # sync mode: when the disk was last found without it


def eligible(prim, operands, compute_dtype, out_dtype, out_shape, params=None) -> bool:
    """Whether a plan (one signature of `prim`, with its params) may run through a kernel:
    an elementwise float op with a scalar rule over at least MIN_ELEMENTS, its array
    operands all of the output's shape. A bf16 `out_dtype`: an op on bf16 words (see the
    top), its tensor operands all bf16."""
    if prim.scalar is None or prim.kind != "elementwise" or not prim.promote:
        return False
    if compute_dtype.name not in ("float32", "float64") or out_dtype.name not in _OUT_DTYPES:
        return False
    n = 1
    for d in out_shape:
        if not isinstance(d, int):
            return False
        n *= d
    words = out_dtype.name == "bfloat16"
    if n < MIN_ELEMENTS and not _rule_facts(prim, len(operands), compute_dtype.name, params)[1] \
            and not (n >= MANY_PASS_MIN_ELEMENTS and prim.extra.get("passes", 1) >= 3):
        if not words or n < WORDS_MIN_ELEMENTS or _gains_on_one_core(prim, len(operands), compute_dtype.name, params):
            return False
    for shape in operands:  # a shape per tensor operand, None for a Python scalar
        if shape is not None and shape != () and tuple(shape) != tuple(out_shape):
            return False
    if not loader.enabled():
        return False
    if words or _gains_on_one_core(prim, len(operands), compute_dtype.name, params):
        return True
    # Arithmetic: only the split over cores gains (see ARITH_MIN_ELEMENTS; `run` also
    # leaves it to numpy while other processes hold all but one core).
    if n >= _arith_min(n) and _CPUS > 1:
        _ARITH.add(prim)
        return True
    return False


_ARITH: set = set()   # the arithmetic primitives some plan sent here
def declines(prim, out_shape) -> bool:
    """Whether `run` would give None now without looking at the operands (lets
    registry.run_into skip its overlap check)."""
    if prim not in _ARITH:
        return False
    n = math.prod(out_shape)
    return (n < ARITH_MIN_ELEMENTS and not sharepool.warm()) or n < _arith_min(n)


def _arith_min(n: int) -> int:
    """The elements from which arithmetic of `n` elements runs here: ARITH_MIN_ELEMENTS, or
    PAIR_ARITH_MIN_ELEMENTS where parallel flat kernels have GIL-free pairs."""
    global _flat_pairs
    if n < PAIR_ARITH_MIN_ELEMENTS or n >= ARITH_MIN_ELEMENTS:
        return ARITH_MIN_ELEMENTS
    if _flat_pairs is None:   # (an import statement per call cost 1.4 us)
        from ...codegen_chunks import flat_pairs as _flat_pairs
    return PAIR_ARITH_MIN_ELEMENTS if _flat_pairs() else ARITH_MIN_ELEMENTS


_flat_pairs = None


_CPUS = usable_cpus()


_MATH: dict = {}


class _Probe:
    """Stands in for the kernel generator's emitter to see whether a scalar rule calls a
    math function, without importing the compiler (a plan for ``a * b`` must not)."""

    called = False
    many_passes = False   # calls one of _MANY_PASS_FUNCTIONS

    def const(self, v, dtype=None):
        return repr(v)

    def call(self, fn, *args):
        self.called = True
        self.many_passes = self.many_passes or fn in _MANY_PASS_FUNCTIONS
        return f"{fn}({', '.join(args)})"

    def cast(self, x, dtype):
        return x

    def pow(self, a, b):
        # The general power is a math call (a plan does not know the exponent's value).
        self.called = True
        return f"{a} ** {b}"


def _gains_on_one_core(prim, n: int, dtype: str, params=None) -> bool:
    """Whether the op's scalar rule calls a math function or selects (a conditional
    expression): those gain 10-35x even on one core (numpy's float32 erf over 4M: 380 ms),
    where arithmetic runs at memory speed in numpy already."""
    return _rule_facts(prim, n, dtype, params)[0]


def _rule_facts(prim, n: int, dtype: str, params=None) -> tuple:
    """(`_gains_on_one_core`'s answer, whether the rule calls one of
    _MANY_PASS_FUNCTIONS), from one probe of the scalar rule."""
    # The params are part of the question (pow_backward's exponent is one: its rule
    # calls the power function); a rule that needs params gets them.
    pkey = tuple(sorted(params.items())) if params else ()
    key = (prim.name, n, dtype, pkey)
    found = _MATH.get(key)
    if found is None:
        probe = _Probe()
        try:
            expr = prim.scalar(probe, *[f"x{k}" for k in range(n)], **(params or {}))
            found = (probe.called or " if " in expr, probe.many_passes)
        except Exception:  # a rule the probe cannot run: not taken for a math op
            found = (False, False)
        if len(_MATH) > 4096:   # (params of many values, e.g. a fuzzer's)
            _MATH.clear()
        _MATH[key] = found
    return found


def run(prim, arrays, params, compute_np, out_np, out_shape, out=None):
    """The op's result from its kernel, or None (not loaded yet, or arithmetic while one
    core is free: the caller uses numpy). ``out``: a C-contiguous array of the output's
    shape and dtype to write into (it may be an input: each element is read before it is
    written, at the same index)."""
    n = math.prod(out_shape)
    words = out_np == _bf16.STORAGE   # (numpy's three passes: the kernel always gains)
    # below ARITH_MIN_ELEMENTS arithmetic runs only as the kernel's GIL-free pair, right
    # after a two-thread job: another launch costs more than half the loop
    pair_only = n < ARITH_MIN_ELEMENTS and prim in _ARITH and not words
    if pair_only and (not sharepool.warm() or n < _arith_min(n)):
        return None
    prepared = _prepare(prim, arrays, params, compute_np, out_np)
    if prepared is None:
        return None
    key, layout, args, strided = prepared
    parallel = n >= PARALLEL_MIN  # the compiled kernels' rule (threads.PARALLEL_MIN)
    key = key + (parallel,)
    entry = _entries.get(key)
    fn = entry.fn if entry is not None else None
    if fn is None:
        fn = _obtain(key, prim, layout, params, compute_np, out_np, parallel)
        if fn is None:
            return None
    if prim in _ARITH and not words and _one_core_free():
        # numpy's loop on this core is as fast, without the launch (the kernel is kept, or
        # its compile started above, for when the cores are free again)
        return None
    if out is None:
        out = np.empty(out_shape, out_np)
    for k in strided:   # copied only now: a call that ends on numpy above pays no copy
        args[k] = np.ascontiguousarray(args[k]).reshape(-1)
    # The nest's calling convention (loopnest.LoopNest.arguments): inputs, output, n.
    if pair_only:
        pair_call = getattr(fn, "pair_call", None)
        if pair_call is None or not pair_call(*args, out.reshape(-1), n):
            return None
    else:
        fn(*args, out.reshape(-1), n)
    _stats["launches"] += 1
    return out


def add_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst += src`` for in-place gradient accumulation, through add's kernel where a large
    eager add would run one, else numpy's loop (one shape; other layouts take numpy)."""
    dt = dst.dtype
    if (dst.size >= ARITH_MIN_ELEMENTS and _CPUS > 1 and dt.name in _FLOAT_NAMES
            and src.dtype == dt and src.flags.c_contiguous and loader.enabled() and not _one_core_free()
            and run(ADD, (dst, src), {}, dt, dt, dst.shape, out=dst) is not None):
        return
    if dt == _bf16.STORAGE:
        _bf16.add_into(dst, src)    # (words are no integers to add)
    else:
        np.add(dst, src, out=dst)


def copy_of(src: np.ndarray):
    """A C-contiguous copy of `src` through copy's kernel where a large eager add would run
    one, else None (the caller copies with numpy): for the backward's copies of gradients a
    leaf cannot take as they are. A copy is bitwise whatever copies it."""
    dt = src.dtype
    if (src.size >= ARITH_MIN_ELEMENTS and _CPUS > 1 and dt.name in _FLOAT_NAMES
            and src.flags.c_contiguous and loader.enabled() and not _one_core_free()):
        return run(COPY, (src,), {}, dt, dt, src.shape)
    return None


def _one_core_free() -> bool:
    """Whether coreshare (tracejit/compiler/cpu/runtime/coreshare.py) would give a parallel kernel one thread
    now; False when it is turned off (the kernel then runs on numba's own count)."""
    return coreshare.ENABLED and coreshare.core_share.threads() < 2


def _prepare(prim, arrays, params, compute_np, out_np):
    """(kernel key, operand layout, kernel arguments, indices of strided arguments), or None
    for an operand the kernel does not take. Layout per operand: "a" (an array, passed
    flat), "w" (bf16 words, passed flat), "s" (a scalar, a 1-element array) or "c<value>" (a
    small integer constant written into the kernel: ``x ** 3`` as ``x*x*x``). A strided
    view of unit-stride rows (a slice along a later dim, a chunk's half) is passed as
    itself, for `run` to copy to C order: see `_copies_pay`."""
    args = []
    layout = []
    strided = ()
    for a in arrays:
        if isinstance(a, np.ndarray) and a.ndim:
            words = a.dtype == _bf16.STORAGE
            if a.flags.c_contiguous:
                args.append(a.reshape(-1))
                layout.append("w" if words else "a")
                continue
            if _unit_stride_rows(a) and _copies_pay(prim, len(arrays), compute_np, params, words):
                strided += (len(args),)
                args.append(a)
                layout.append("w" if words else "a")
                continue
            if any(a.strides) or not a.size or words:
                return None
            # One value broadcast to the output (every stride 0: a sum's gradient
            # expanded): the operand is that value, a scalar to the kernel.
            a = a[(0,) * a.ndim]
        v = compute_np.type(a)
        fv = float(v)
        if fv in _SMALL_INT_POWERS:
            layout.append(f"c{fv!r}")
        else:
            layout.append("s")
            args.append(np.full(1, v, compute_np))
    # dtype objects compare and hash by value: no `.name` lookups per call
    key = (prim.name, compute_np, out_np, tuple(layout),
           tuple(sorted(params.items())) if params else ())
    return key, layout, args, strided


def _unit_stride_rows(a: np.ndarray) -> bool:
    """Whether `a` is rows of unit stride at any strides between them, each element read
    once (no broadcast dim): its copy is a pass of row copies, no larger than the view. A
    transpose's gather is left to numpy."""
    return (a.size > 0 and a.strides[-1] == a.itemsize
            and all(s != 0 or d == 1 for s, d in zip(a.strides, a.shape)))


def _copies_pay(prim, n: int, compute_np, params, words: bool) -> bool:
    """Whether a strided operand is better copied to C order for the flat kernel than left
    to numpy: for bf16 words (numpy's three passes) and for rules calling a math function
    or selecting, which gain many times the copy's one pass (the compiled plans' rule,
    compiler/plan.py `_copy_pays`). Arithmetic gains only from the second core, which the
    copy's pass on one core would eat."""
    return words or _gains_on_one_core(prim, n, np.dtype(compute_np).name, params)


def _obtain(key, prim, layout, params, compute_np, out_np, parallel):
    """The kernel when it is loaded; else None (the caller uses numpy this time). Background
    mode: a `_Preparation` thread renders, loads or has a worker compile it; sync mode: a
    kernel on disk is loaded on the spot, nothing is compiled."""
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _Entry(None)
            entry.failed = False  # no spec yet: rendered below or by the preparation
        if entry.failed:
            return None
        if entry.fn is not None:
            return entry.fn
        job = entry.job
        if isinstance(job, _Preparation) and not job.done() and not job.lost():
            now = loader.note_ask(job)
            if not job.started and loader.go_now(job.first, now):
                job.start()
            return None  # being prepared: the preparation sets fn (or failed)
        if not loader._sync_mode():
            entry.job = _Preparation(entry, (prim, layout, params, compute_np, out_np, parallel))
            if loader._GO_AFTER_S <= 0:
                entry.job.start()
            return None
        now = time.monotonic()
        if now - entry.checked < _RECHECK_S:
            return None  # looked a moment ago: numpy, without asking the disk again
        if entry.spec is None:
            entry.spec = _render(prim, layout, params, compute_np, out_np, parallel)
            if entry.spec is None:
                return _give_up(entry, counted=False)  # `_render` counted it as unsupported
        from ... import diskcache
        if diskcache.is_cached(entry.spec.source, entry.spec.llvm_options):
            return _load(entry, prim)
        entry.checked = now
        return None  # sync mode wants no background compiles: only what is on disk is used


# Sync mode looks for a kernel not on disk again only after this long: the look costs
# ~350 us a call, and another process may put it there meanwhile.
_RECHECK_S = 1.0


class _Preparation:
    """Makes one entry's kernel ready in a thread of its own (render, disk check, load or a
    worker's compile); sets the entry's ``fn`` or ``failed``, then ``done()``."""

    __slots__ = ("entry", "args", "event", "pid", "first", "last", "gap", "started", "outside")

    def __init__(self, entry, render_args):
        self.entry = entry
        self.args = render_args   # (prim, layout, params, compute_np, out_np, parallel)
        self.event = threading.Event()
        self.pid = os.getpid()
        self.first = self.last = loader.noted_first(time.monotonic())   # the op's first and latest call
        self.gap = 0.0   # the longest time between two of its calls
        self.started = False
        self.outside = outside()   # asked for outside a tier-0 forward (`note_ask`)

    def done(self) -> bool:
        return self.event.is_set()

    def lost(self) -> bool:
        """Started by the process we were forked from: its thread is not ours."""
        return self.pid != os.getpid() and not self.event.is_set()

    def start(self) -> None:
        with _start_lock:   # once, whether a call (holding _lock) or `settle` starts it
            if self.started:
                return
            self.started = True
        threading.Thread(target=self._run, args=self.args, daemon=True,
                         name="tracejit-eager-kernel").start()

    def _run(self, prim, layout, params, compute_np, out_np, parallel) -> None:
        entry = self.entry
        try:
            spec = entry.spec
            if spec is None:
                spec = entry.spec = _render(prim, layout, params, compute_np, out_np, parallel)
            if spec is None:
                _give_up(entry, counted=False)
                return
            from ... import diskcache, workers
            if not diskcache.is_cached(spec.source, spec.llvm_options):
                if diskcache.cache_dir() is None:
                    _give_up(entry)  # nowhere to compile in the background
                    return
                # rank LATER when only tier-0 forwards asked (`outside`)
                rank = workers.EAGER if self.outside else workers.LATER
                job = workers.submit(spec.source, _label(prim), spec.llvm_options, rank=rank,
                                     asked=lambda: (self.last, self.gap))   # (workers.ASKED_WITHIN_S)
                with _lock:
                    _stats["submitted"] += 1
                job.event.wait()  # the pool fails a job that hangs past its timeout
                if not job.ok:
                    _give_up(entry)
                    return
            _pair_ready(_load(entry, prim), None if self.outside else workers.LATER)
        except Exception:  # never let a kernel break the op: it stays on numpy
            if entry.fn is None and not entry.failed:
                _give_up(entry)
        finally:
            self.event.set()


def _pair_ready(fn, rank=None) -> None:
    """Wait until a loaded chunk kernel's GIL-free pair is ready too, compiled by a worker
    where the disk lacks it; the preparation counts as done for `settle` only after this.
    Asked for at the first two-share call instead, its compile ran beside the calls it
    should speed up. `rank`: the pair's job's."""
    pending = getattr(fn, "pending", None)
    prepare = getattr(pending, "prepare", None)
    job = prepare(rank) if prepare is not None else None
    if job is not None:
        job.event.wait()   # the pool fails a job that hangs past its timeout


def _label(prim) -> str:
    return f"eager_{prim.name}"


def _give_up(entry, counted: bool = True) -> None:
    """This kernel stays on numpy for the life of the process (counted in `stats`)."""
    entry.failed = True
    if counted:
        _stats["failed"] += 1
    return None


def _load(entry, prim):
    """Load the entry's kernel through the CPU backend (which guards a parallel one)."""
    from ... import backends
    spec = entry.spec
    try:
        fn = backends.get("cpu").load(spec, _label(prim), spec.parallel)
    except Exception:  # a kernel that does not build stays on numpy, never breaks the op
        return _give_up(entry)
    _stats["loaded"] += 1
    entry.fn = fn   # published last: whoever sees it loaded also sees it counted
    return fn


_OPERAND_KINDS = {"a": "array", "w": "words", "s": "scalar"}


def _render(prim, layout, params, compute_np, out_np, parallel):
    """The kernel of `prim` over operands laid out as `layout`: the op lowered as a group of
    one equation and rendered by the CPU backend. None when the scalar rule cannot be
    rendered (counted as ``unsupported``)."""
    try:
        from ... import backends, loopnest
    except ImportError:
        _stats["unsupported"] += 1
        return None
    operands = [_OPERAND_KINDS[lay] if lay in _OPERAND_KINDS else float(lay[1:]) for lay in layout]
    try:
        out_name = "bfloat16" if out_np == _bf16.STORAGE else np.dtype(out_np).name   # (its words)
        nest = loopnest.lower_op(prim, operands, params, np.dtype(compute_np).name, out_name)
        return backends.get("cpu").render(nest, parallel)
    except (NotImplementedError, KeyError, ValueError, TypeError):
        _stats["unsupported"] += 1
        return None


def settle(timeout: float = 300.0) -> bool:
    """Wait until every eager kernel compile submitted so far has finished, their GIL-free
    pairs included, and the thread policy no longer counts them. For measurements of
    steady-state eager speed and tests. True when nothing is pending, False at the
    timeout."""
    from ... import workers
    with workers.waiting():   # a held job (workers.HOLD_POLL_S) is what we wait for now
        return _settle(timeout)


def _settle(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        # (a loaded kernel's preparation may still be readying its pair: `_pair_ready`)
        pending = [e for e in list(_entries.values())
                   if e.job is not None and not e.failed
                   and not e.job.done() and not e.job.lost()]
        for e in pending:
            # A preparation waiting for the op's next call (`_GO_AFTER_S`) starts now:
            # nothing else would start it while we wait.
            if isinstance(e.job, _Preparation) and not e.job.started:
                e.job.start()
        if not pending:
            settled = loader.settle(deadline)   # the hand-written kernels' too
            loader._reread_thread_count()
            return settled
        if time.monotonic() >= deadline:
            return False
        pending[0].job.event.wait(min(0.5, max(0.0, deadline - time.monotonic())))


def pending(since: float | None = None) -> list:
    """The labels of eager kernels (this module's and loader.py's) an op has asked for that
    are neither loaded nor failed; with `since` (monotonic), only those asked for at or
    after it. Starts nothing, unlike `settle`."""
    out = [_pending_label(e.job)
           for e in list(_entries.values())
           if e.job is not None and e.fn is None and not e.failed and not e.job.lost()
           and (since is None or getattr(e.job, "last", since) >= since)]
    return out + [k.label for k in list(loader._kernels.values())
                  if k.coming() and (since is None or (k.last is not None and k.last >= since))]


def _pending_label(job) -> str:
    """An eager kernel's label: its op's (a rendered spec's name is "kernel" for all)."""
    args = getattr(job, "args", None)
    return _label(args[0]) if args else "eager kernel"


def stats() -> dict:
    """Counters: kernel launches, compiles submitted, kernels loaded, unsupported ops,
    kernels given up (no cache directory, a failed compile or load)."""
    return dict(_stats)
