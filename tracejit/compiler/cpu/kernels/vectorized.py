"""Large eager elementwise ops through numba kernels made from the op's own record.

numpy runs each elementwise op on one core, and its transcendental loops are as fast as
the installed numpy's (float32 ``erf`` has no numpy loop at all: ops/_special.py builds
it from ~30 array passes). PyTorch eager runs them multi-threaded and vectorized. So an
eager elementwise op over many elements (``MIN_ELEMENTS``) runs a numba kernel made
from the primitive's ``scalar`` rule by the compiler's one lowering: the op is described
as a fused group of one equation (`compiler.loopnest.lower_op`) and rendered by the CPU
backend (compiler/codegen_cpu.py), exactly as a compiled group is, with the same
vectorizable math (compiler/mathlib.py). There is no second kernel generator here.

Threads follow the compiled kernels' policy: at ``threads.PARALLEL_MIN`` elements and
more (every size that gets here at the default ``MIN_ELEMENTS``) the parallel variant
(``prange``) runs, loaded by the CPU backend (`backends.CpuBackend.load`), which wraps it
in `coreshare.guard_parallel`: its thread count follows the cores other processes leave
free (tracejit/compiler/cpu/runtime/coreshare.py), and numba's workers stop spinning soon after it
(threads.py's ``GOMP_SPINCOUNT``). Smaller sizes (a rule calling erf, or a lowered
``MIN_ELEMENTS``) run the serial twin.

The first call must not pay a compile (0.2-1 s per kernel, seconds under load), nor
numba's import (0.5-1.7 s) and a load: a kernel is used only once it is *loaded*, in
background mode (the default) in a thread of its own (`_Preparation`): it renders the
kernel and loads it when its disk-cache entry exists, else has the compile workers
(compiler/workers.py: separate processes, holding neither our GIL nor numba's lock) build
it first. Calls use numpy until then. The thread starts at the op's first call a second
or more after its first: numba's import holds the GIL, and in the user's first step it
would slow every op. The eager dispatcher decides per signature plan (ops/registry.py), so
ops that do not come here pay nothing. With ``TRACEJIT_CACHE=0`` eager stays on numpy;
with ``TRACEJIT_COMPILE=sync`` (the test suite) a kernel on disk loads in the call and
nothing is compiled; ``TRACEJIT_EAGER_KERNELS=0`` turns the kernels off.

Which ops run here, by what the scalar rule computes (`_gains_on_one_core`, answered without
importing the compiler: a plan for ``a * b`` must not import it): an op that calls a math
function or selects from ``MIN_ELEMENTS`` (one calling erf, which numpy makes of ~30
passes, from the first element); arithmetic and comparisons (one numpy loop at memory
speed) from ``ARITH_MIN_ELEMENTS``, where splitting the loop over the free cores pays for
the launch (see `eligible`), and from ``PAIR_ARITH_MIN_ELEMENTS`` where the kernel's two
shares launch without Python (`cshares.ChunkKernel.pair_call`); below that, to numpy's
loop. Arithmetic results are bitwise
numpy's (IEEE operations, no fastmath); math functions can differ in the last bits
(mathlib's float32 functions are within a few ulps of the correctly rounded result).
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
from ....ops.impls import TIER0_THREADS, outside, serving_tier0, standin, standing_in  # noqa: F401  (the ask's context)
from . import loader

__all__ = ["MIN_ELEMENTS", "ARITH_MIN_ELEMENTS", "PAIR_ARITH_MIN_ELEMENTS", "add_into", "copy_of", "eligible", "run", "settle", "stats"]

# Below this many output elements the kernel call and dispatch cost more than they save.
MIN_ELEMENTS = 1 << 15
# Arithmetic (no math function in the scalar rule) gains only from the second core: numpy's
# loop is already at one core's memory speed, and a 2-thread launch waits for the second
# thread to wake. `x * 1.001` float32 on 2 shared cores: 1M even, 4M 2.7-3.3 vs 4.2 ms.
ARITH_MIN_ELEMENTS = 1 << 20
# Arithmetic from here where a parallel flat kernel has a GIL-free pair (codegen_chunks.
# flat_pairs: its two shares on this thread and the pool's worker, a few us a launch), right
# after a two-thread job (sharepool.warm). Why: after a product both cores hold its
# operands' lines, and an update of a weight one core alone writes pays for every line the
# other core read (the two-layer step's ``w1 -= t``, 100K float32: 65-75 us against 9 us
# when no other core read w1); two shares halve it, and ``lr * g`` reads each half of the
# gradient where its product wrote it. Elsewhere (a chain of 256K-element ops on a worker
# gone to sleep) the pair lost to numpy's loop (1.15x).
PAIR_ARITH_MIN_ELEMENTS = 1 << 16
# Math functions numpy has no ufunc for (float32 erf: ~30 passes, ops/_special.py): a rule
# calling one runs as a kernel from the first element (exact GELU, 512 float32: 29 -> 3.7 us).
_MANY_PASS_FUNCTIONS = frozenset(("erf",))

# Output dtypes an eligible op may have (a filter: the renderer spells every type itself).
_OUT_DTYPES = ("float32", "float64", "bool")
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
    an elementwise op with a scalar rule, computing in float32/float64, over at least
    MIN_ELEMENTS, whose array operands all have the output's shape (no broadcasting: a flat
    loop)."""
    if prim.scalar is None or prim.kind != "elementwise" or not prim.promote:
        return False
    if compute_dtype.name not in ("float32", "float64") or out_dtype.name not in _OUT_DTYPES:
        return False
    n = 1
    for d in out_shape:
        if not isinstance(d, int):
            return False
        n *= d
    if n < MIN_ELEMENTS and not _rule_facts(prim, len(operands), compute_dtype.name, params)[1]:
        return False
    for shape in operands:  # a shape per tensor operand, None for a Python scalar
        if shape is not None and shape != () and tuple(shape) != tuple(out_shape):
            return False
    if not loader.enabled():
        return False
    if _gains_on_one_core(prim, len(operands), compute_dtype.name, params):
        return True
    # Arithmetic: only the split over cores gains (see ARITH_MIN_ELEMENTS; `run` also
    # leaves it to numpy while other processes hold all but one core).
    if n >= _arith_min(n) and _CPUS > 1:
        _ARITH.add(prim)
        return True
    return False


_ARITH: set = set()   # the arithmetic primitives some plan sent here
def declines(prim, out_shape) -> bool:
    """Whether `run` would give None now without looking at the operands: no arithmetic
    below `_arith_min` runs here, nor below ARITH_MIN_ELEMENTS outside `sharepool.warm`.
    Lets registry.run_into skip its overlap check (1-2 us)."""
    if prim not in _ARITH:
        return False
    n = math.prod(out_shape)
    return (n < ARITH_MIN_ELEMENTS and not sharepool.warm()) or n < _arith_min(n)


def _arith_min(n: int) -> int:
    """The elements from which arithmetic of `n` elements runs here: ARITH_MIN_ELEMENTS, or
    PAIR_ARITH_MIN_ELEMENTS where parallel flat kernels have GIL-free pairs (asked only
    from that size: a plan for a small ``a * b`` imports no compiler)."""
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
    """Whether the op's scalar rule calls a math function (exp, tanh, erf, sqrt, ...) or
    selects (a conditional expression: ReLU's gradient, clamp, where).

    Those run as kernels from MIN_ELEMENTS: a transcendental (numpy's float32 erf: 380 ms
    over 4M elements, sigmoid 130 ms) gains 10-35x even on one core, and numpy has no
    one-pass select (a comparison pass, then a select pass: ReLU's gradient over 64K
    float32 24 us against the kernel's 15 us on one core). Arithmetic and comparisons are
    one numpy loop already at one core's memory speed: they run here only from
    ARITH_MIN_ELEMENTS, for the second core. (Before the thread count followed the free
    cores, tracejit/compiler/cpu/runtime/coreshare.py, a 2-thread kernel for them lost to
    numpy whenever other work held a core: 7.4 vs 3.6 ms over 4M.)
    """
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
    """The op's result from its kernel, or None (not loadable yet, or arithmetic while
    only one core is free: the caller uses numpy). ``out``: a C-contiguous array of the
    output's shape and dtype to write into (it may be one of the inputs: every element
    is read before it is written, at the same index)."""
    n = math.prod(out_shape)
    # below ARITH_MIN_ELEMENTS arithmetic runs only as the kernel's GIL-free pair, right
    # after a two-thread job (`sharepool.warm`): another launch, or a sleeping worker,
    # costs more than half of the loop here
    pair_only = n < ARITH_MIN_ELEMENTS and prim in _ARITH
    if pair_only and (not sharepool.warm() or n < _arith_min(n)):
        return None
    prepared = _prepare(prim, arrays, params, compute_np, out_np)
    if prepared is None:
        return None
    key, layout, args = prepared
    parallel = n >= PARALLEL_MIN  # the compiled kernels' rule (threads.PARALLEL_MIN)
    key = key + (parallel,)
    entry = _entries.get(key)
    fn = entry.fn if entry is not None else None
    if fn is None:
        fn = _obtain(key, prim, layout, params, compute_np, out_np, parallel)
        if fn is None:
            return None
    if prim in _ARITH and _one_core_free():
        # numpy's loop on this core is as fast, without the launch (the kernel is kept, or
        # its compile started above, for when the cores are free again)
        return None
    if out is None:
        out = np.empty(out_shape, out_np)
    # The nest's calling convention (loopnest.LoopNest.arguments): inputs, output, n.
    if pair_only:
        pair_call = getattr(fn, "pair_call", None)
        if pair_call is None or not pair_call(*args, out.reshape(-1), n):
            return None
    else:
        fn(*args, out.reshape(-1), n)
    _stats["launches"] += 1
    return out


def add_into(prim, dst: np.ndarray, src: np.ndarray) -> None:
    """``dst += src`` for in-place gradient accumulation (the backward engine's buffers, a
    leaf's ``.grad``): through `prim`'s (add's) kernel where a large eager add would run
    one, else numpy's loop. Both arrays have one shape (the callers check); a
    non-contiguous or differently typed pair takes numpy's loop."""
    dt = dst.dtype
    if (dst.size >= ARITH_MIN_ELEMENTS and _CPUS > 1 and dt.name in _FLOAT_NAMES
            and src.dtype == dt and src.flags.c_contiguous and loader.enabled() and not _one_core_free()
            and run(prim, (dst, src), {}, dt, dt, dst.shape, out=dst) is not None):
        return
    if dt == _bf16.STORAGE:
        _bf16.add_into(dst, src)    # (words are no integers to add)
    else:
        np.add(dst, src, out=dst)


def copy_of(prim, src: np.ndarray):
    """A C-contiguous copy of `src` through `prim`'s (copy's) kernel where a large eager
    add would run one (2 threads over the free cores), else None (the caller copies with
    numpy, on one core). For the backward's copies of gradients a leaf cannot take as
    they are (AccumulateGrad: add's VJP hands one tensor to both its inputs, so z's
    gradient in ``x * y + z`` is a 16 MB copy per step of the GELU chain over 4M floats).
    A copy is bitwise whatever copies it."""
    dt = src.dtype
    if (src.size >= ARITH_MIN_ELEMENTS and _CPUS > 1 and dt.name in _FLOAT_NAMES
            and src.flags.c_contiguous and loader.enabled() and not _one_core_free()):
        return run(prim, (src,), {}, dt, dt, src.shape)
    return None


def _one_core_free() -> bool:
    """Whether coreshare (tracejit/compiler/cpu/runtime/coreshare.py) would give a parallel kernel one thread
    now; False when it is turned off (the kernel then runs on numba's own count)."""
    return coreshare.ENABLED and coreshare.core_share.threads() < 2


def _prepare(prim, arrays, params, compute_np, out_np):
    """(kernel key, operand layout, kernel arguments), or None for a non-contiguous operand
    (other than one value broadcast to the output).

    Layout per operand: "a" (an array: a flat view is passed), "s" (a scalar: passed as a
    1-element array, the nest's "scalar" layout) or "c<value>" (a small integer constant,
    written into the kernel: ``x ** 3`` becomes ``x * x * x``, as in a compiled kernel)."""
    args = []
    layout = []
    for a in arrays:
        if isinstance(a, np.ndarray) and a.ndim:
            if a.flags.c_contiguous:
                args.append(a.reshape(-1))
                layout.append("a")
                continue
            if any(a.strides) or not a.size:
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
    return key, layout, args


def _obtain(key, prim, layout, params, compute_np, out_np, parallel):
    """The kernel when it is loaded; else None (the caller uses numpy this time).

    Background mode (the default): nothing happens on the caller's thread but
    bookkeeping. A `_Preparation` thread renders the kernel, checks the disk, loads it
    (numba's import, 0.5-1.7 s, and the load happen there) or has a worker compile it
    first; calls use numpy until it is loaded. Sync mode: a kernel on disk is loaded on
    the spot, nothing is compiled."""
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


# Sync mode looks for a kernel that is not on disk again only after this long: the look
# (the source's hash and a file check) cost ~350 us, on every call of the op (float64 sin
# over 100K elements: 2.07 ms a call against numpy's 1.72 ms). Another process may put
# it there meanwhile, so the disk is asked again now and then.
_RECHECK_S = 1.0


class _Preparation:
    """Makes one entry's kernel ready in a thread of its own: render, disk check, then
    a load, or a worker's compile and then a load. Sets the entry's ``fn`` (or
    ``failed``); ``done()`` after that."""

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
    """Wait until a loaded chunk kernel's GIL-free pair (compiler/cpu/runtime/cshares.py: its two shares
    on this thread and the pool's worker) is ready too, compiled by a worker where the disk
    lacks it. The kernel is in use meanwhile (its shares through sharepool.run_shares); the
    preparation counts as done, for `settle`, only after this. Why here: a `Pending` pair
    is otherwise asked for at the kernel's first two-share call, and its compile then ran
    beside the calls that followed. In `python -m bench`'s eager runs, right after
    `settle`: the worker's core was gone while the calls split their work over two
    (coreshare samples every 0.25 s, a timed run of 15 samples lasts 50-400 ms), or the
    policy read the worker as another process and gave one thread. `rank`: the pair's job's
    (its kernel's: LATER for a kernel only tier-0 forwards asked for)."""
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
    """Load the entry's kernel through the CPU backend (which wraps a parallel one in
    `coreshare.guard_parallel`, as it does for compiled plans, and starts numba's
    threads: `coreshare.threading_layer`)."""
    from ... import backends
    spec = entry.spec
    try:
        fn = backends.get("cpu").load(spec, _label(prim), spec.parallel)
    except Exception:  # a kernel that does not build stays on numpy, never breaks the op
        return _give_up(entry)
    _stats["loaded"] += 1
    entry.fn = fn   # published last: whoever sees it loaded also sees it counted
    return fn


def _render(prim, layout, params, compute_np, out_np, parallel):
    """The kernel of `prim` over operands laid out as `layout` (see `_prepare`): the op
    lowered as a group of one equation (`loopnest.lower_op`) and rendered by the CPU
    backend, exactly as a compiled group's kernel. None when the op's scalar rule cannot
    be rendered (counted as ``unsupported``)."""
    try:
        from ... import backends, loopnest
    except ImportError:
        _stats["unsupported"] += 1
        return None
    operands = ["array" if lay == "a" else "scalar" if lay == "s" else float(lay[1:])
                for lay in layout]
    try:
        nest = loopnest.lower_op(prim, operands, params, np.dtype(compute_np).name,
                                 np.dtype(out_np).name)
        return backends.get("cpu").render(nest, parallel)
    except (NotImplementedError, KeyError, ValueError, TypeError):
        _stats["unsupported"] += 1
        return None


def settle(timeout: float = 300.0) -> bool:
    """Wait until every eager kernel compile submitted so far has finished, so that the
    next call of each op loads its kernel, and each loaded chunk kernel's GIL-free pair
    with it (`_pair_ready`): nothing of theirs compiles after it returns, and the thread
    policy's count no longer counts their compiles (`_reread_thread_count`). For
    measurements of steady-state eager speed (bench/impls/tracejit_impl.py) and tests; a
    user's program never needs it. True when nothing is pending any more, False at the
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
    """The eager kernels (this module's and compiler/cpu/kernels/loader.py's hand-written ones) an op has
    asked for that are neither loaded nor failed: their labels. With `since` (a
    time.monotonic() reading), only those an op asked for at or after it: a program's
    step asks again for the kernels it calls, and a kernel asked for in tier 0 by an op the
    compiled step no longer runs (or by a path the load turned off: two halves of a
    product) is not what that step waits for (its loader starts only at the op's next call
    a second or more after its first, so a kernel asked for once is not compiled). Starts
    nothing, unlike `settle`: bench_tiers steps a program until this is empty, so the
    kernels arrive as they would for a user (a compile finished in a worker loads at the
    op's next call)."""
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
