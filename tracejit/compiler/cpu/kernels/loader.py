"""The CPU backend's one kernel loader: when a kernel an eager call or a plan asks for is
compiled and loaded, for the elementwise kernels made from scalar rules (vectorized.py)
and the hand-written ones (`NativeKernel`).

The first call never pays a compile or numba's import. In background mode the compile
workers build a kernel into the disk cache and a thread of its own loads it, started at
the op's first call a second or more after its first (`go_now`); calls run the numpy form
until then, so results never depend on whether a kernel ran. ``TRACEJIT_COMPILE=sync``
loads (or compiles) a kernel in the first call; ``TRACEJIT_EAGER_KERNELS=0`` turns every
kernel here off.
"""
from __future__ import annotations

import math
import os
import threading
import time

import numpy as np

from .... import envflags
from ....ops.impls import outside, standin
from ..runtime import coreshare
from ...prepare import compile_mode

__all__ = ["NativeKernel", "kernel", "takes", "floats", "standing_in", "enabled", "go_now", "note_ask", "settle",
           "lowered", "one_group", "rendered", "entry"]


# ---------------------------------------------------------------- the loading policy
def enabled() -> bool:
    return envflags.enabled("TRACEJIT_EAGER_KERNELS")


def _sync_mode() -> bool:
    """TRACEJIT_COMPILE=sync asks for no background compiles (compiler/tiers.py); eager
    never compiles on the caller's time, so then it only loads kernels already on disk."""
    return compile_mode(None) == "sync"


# The preparation thread starts at the op's first call this long after its first: earlier,
# numba's import and a worker's compile compete with the user's first step (an LSTM step's
# first warm-disk step went from ~0.9 s to 2.7-3.2 s at 0.2 s).
_GO_AFTER_S = 1.0
# ... but an op first called `_GO_AFTER_S` or more after the process's first ask (a kernel
# variant a later step asks for) starts at its next call.
_first_ask = None   # time.monotonic() of this process's first op call that asked (`go_now`)


def noted_first(now: float) -> float:
    """An op's first call asking for its kernel at `now` (the process's first ask, if it
    is: then numba's import is scheduled, `_warm_later`); returns `now`."""
    global _first_ask
    if _first_ask is None:
        _first_ask = now
        _warm_later()
    return now


# numba's import happens `_GO_AFTER_S` after the process's first ask on a timer of its own,
# so that a program that pauses meanwhile has it done, and its steps do not share the GIL
# with it.
_warm_pid = None


def _warm_later() -> None:
    global _warm_pid
    pid = os.getpid()
    if _warm_pid == pid or not 0.0 <= _GO_AFTER_S <= 60.0:
        return
    _warm_pid = pid
    timer = threading.Timer(_GO_AFTER_S, _import_numba)
    timer.daemon = True
    timer.name = "tracejit-numba-import"
    timer.start()


def _import_numba() -> None:
    try:
        # under the loads' lock (a loader importing numba meanwhile can deadlock), with
        # numba's runtime, which the first kernel loaded compiles with LLVM
        from ... import diskcache
        diskcache.import_numba(runtime=True)
    except Exception:  # a loader meets the same failure and keeps the op on numpy
        pass


def go_now(first: float, now: float, after: float | None = None) -> bool:
    """Whether an op first called at `first`, called again at `now`, starts its kernel's
    loader (`after` its first call, or at once when that came late in the process)."""
    after = _GO_AFTER_S if after is None else after
    return now - first >= after or (_first_ask is not None and first - _first_ask >= after)


def note_ask(holder) -> float:
    """An op's call that found its kernel not loaded: `holder`'s ``last`` and ``gap`` move
    on, as a compile job's ``asked`` reads them, and a `_Preparation`'s ``outside`` becomes
    True at an ask outside a tier-0 forward. Returns the call's time."""
    if getattr(holder, "outside", True) is False and outside():
        holder.outside = True
    now = time.monotonic()
    last = holder.last
    if last is not None and now - last > holder.gap:
        holder.gap = now - last
    holder.last = now
    return now


def _reread_thread_count() -> None:
    """Have the thread policy read the machine afresh once the compile workers are done:
    else a count made over their compiles holds up to a sampling interval after `settle`."""
    if coreshare.ENABLED and coreshare.workers_started():
        coreshare.core_share.reread()



# ---------------------------------------------------------------- hand-written kernels
# (a set of dtypes: `dtype.name` costs 1.6 us; native byte order only)
_KERNEL_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def takes(xp, *arrays) -> bool:
    """Can a hand-written kernel take these arrays: plain numpy arrays of one dtype, float32
    or float64 (the kernels are typed for those). Anything else runs the op's numpy form."""
    if xp is not np:
        return False
    dtype = None
    for a in arrays:
        if type(a) is not np.ndarray or (dtype is not None and a.dtype != dtype):
            return False
        dtype = a.dtype
    return dtype in _KERNEL_DTYPES


def floats(n: int):
    """A registered implementation's checker (ops/impls.py): its call's first `n` operands
    are numpy arrays a hand-written kernel takes (`takes`)."""
    def checker(*arrays, **params) -> bool:
        return takes(np, *arrays[:n])
    checker.__name__ = f"floats{n}"
    return checker


class NativeKernel:
    """One kernel source (a module defining ``kernel``, decorated with
    ``@njit("<signature>", cache=CACHE)``), loaded on demand; ``get()`` is the callable or
    None. `source` may be a function making it, run at load time (not in the op's first
    call), or making a rendered kernel's spec loaded through the CPU backend.
    ``sync_compiles=False``: sync mode only loads it from the disk cache, never compiles
    it in the call (for kernels that merely speed up what BLAS does already)."""

    __slots__ = ("_source", "spec", "label", "fn", "failed", "first", "last", "gap", "thread", "pid", "lock",
                 "sync_compiles", "steady", "later", "outside", "stood_in", "job")

    def __init__(self, source, label: str, sync_compiles: bool = True, steady: bool = False,
                 later: bool = False):
        self._source = source
        self.spec = None    # a rendered kernel's spec, once `source` made it
        self.sync_compiles = sync_compiles
        self.steady = steady   # a compiled step runs it at every call too: rank STEADY
        self.later = later     # it pays on few steps and costs seconds to compile: rank LATER
        self.label = label
        self.fn = None
        self.failed = False
        self.first = None
        self.last = None    # the op's latest call while the kernel was not loaded (`pending`)
        self.gap = 0.0      # the longest time between two such calls (workers.ASKED_WITHIN_S)
        self.thread = None
        self.pid = os.getpid()   # whose thread `thread` is (a forked child starts its own)
        self.lock = threading.Lock()
        # asked for outside every tier-0 forward (ops/impls.py `outside`; `note_ask` sets it
        # at such an ask): until then an EAGER-rank kernel queues at rank LATER (`_rank`)
        self.outside = None
        # the fused kernels still on their way whose stand-ins asked for it (`standing_in`)
        self.stood_in = []
        self.job = None     # its compile job while one is queued or running (`_promote`)

    @property
    def source(self) -> str:
        if callable(self._source):
            made = self._source()
            if not isinstance(made, str):
                self.spec, made = made, made.source
            self._source = made
        return self._source

    def _options(self) -> tuple:
        """The LLVM options its source compiles with (a rendered kernel's own)."""
        self.source
        return self.spec.llvm_options if self.spec is not None else ()

    def get(self):
        """The loaded kernel, or None (the caller runs its numpy form this time)."""
        if not enabled():
            return None
        fn = self.fn
        if fn is not None:
            return fn
        if self.failed:
            return None
        if _sync_mode():
            with self.lock:
                if self.fn is None and not self.failed:
                    if self.sync_compiles or self._on_disk():
                        self._load()
                    else:
                        self.failed = True   # not in this process: numpy's form runs
            return self.fn
        if self.outside is None:
            self.outside = outside()
        now = note_ask(self)
        if self.job is not None and self.outside:
            self._promote()
        elif getattr(_standins, "stack", None):   # (inside a stand-in: `standing_in`)
            fused = _standins.stack[-1]
            if fused not in self.stood_in:
                self.stood_in.append(fused)
                self._promote(up=False)
        with self.lock:
            if self.first is None:
                self.first = noted_first(now)
            elif go_now(self.first, now, _GO_AFTER_S):
                self._start()
        return None

    def load_now(self) -> bool:
        """Load the kernel now in any compile mode, compiling it in this process if the disk
        cache lacks it: for a set-up step that must see the kernels a steady state runs.
        Whether it is loaded."""
        if self.fn is None and enabled():
            with self.lock:
                if self.fn is None:
                    self._load()
        return self.fn is not None

    def coming(self) -> bool:
        """Whether an op has asked for this kernel and it is still being compiled or loaded
        in the background: a fallback kernel asked for now would arrive after it."""
        return (self.fn is None and not self.failed and self.first is not None
                and enabled() and not _sync_mode())

    def _start(self) -> None:
        """Start the loader thread (under `lock`), once per process."""
        if self.pid != os.getpid():
            self.pid, self.thread = os.getpid(), None
        if self.thread is None:
            self.thread = threading.Thread(target=self._prepare, daemon=True,
                                           name="tracejit-native-kernel")
            self.thread.start()

    def _load(self) -> None:
        try:
            from ... import diskcache
            source = self.source
            if self.spec is not None:
                from ... import backends
                self.fn = backends.get("cpu").load(self.spec, self.label, self.spec.parallel)
                return
            self.fn = diskcache.load_module(source, name_hint=self.label).kernel
        except Exception:  # never let a kernel break the op: it stays on numpy
            self.failed = True

    def _on_disk(self) -> bool:
        try:
            from ... import diskcache
            return diskcache.is_cached(self.source, self._options())
        except Exception:
            return False

    def _rank(self) -> int:
        """The rank its compile job queues at (compiler/workers.py): STEADY for a kernel a
        compiled step runs at every call too, LATER for one only a few steps wait on
        (`later`), else EAGER. LATER also while only tier-0 forwards, or the stand-ins of
        fused kernels still compiling, asked for it: the compiled step may never ask for it,
        and it would hold back the kernels the step waits for (`_promote`)."""
        from ... import workers
        if self.steady and not (self.stood_in and self.outside is False):
            return workers.STEADY
        if self.later or self.outside is False:
            return workers.LATER
        return workers.EAGER

    def _promote(self, up: bool = True) -> None:
        """Move its queued job up to its rank now (`_rank`: an ask outside tier 0 came), or
        (not `up`) down to it (asked for in a stand-in)."""
        job = self.job
        if job is None or job.done():
            return
        from ... import workers
        rank = self._rank()
        if up and rank < workers.LATER:
            workers.promote(job, rank)
        elif not up and rank == workers.LATER:
            workers.demote(job, rank)

    def _asked(self) -> tuple:
        """Its job's ``asked``: the op's latest ask and the longest gap between two; held at
        once when only stand-ins of fused kernels now all in asked for it."""
        if self.stood_in and self.outside is False and all(k.fn is not None for k in self.stood_in):
            return (-math.inf, self.gap)
        return (self.last, self.gap)

    def _prepare(self) -> None:
        try:
            from ... import diskcache, workers
            if not diskcache.is_cached(self.source, self._options()):
                if diskcache.cache_dir() is None:
                    self.failed = True  # nowhere to compile in the background
                    return
                # Rank EAGER as vectorized's kernels (they serve tier 0); STEADY for a
                # kernel a compiled step runs too; LATER for `later` kernels and until an
                # ask outside a tier-0 forward (`_rank`).
                job = workers.submit(self.source, self.label, self._options(), rank=self._rank(),
                                     asked=self._asked)
                self.job = job
                if self.outside:
                    self._promote()   # (an ask outside may have come while we submitted)
                job.event.wait()
                self.job = None
                if not job.ok:
                    self.failed = True
                    return
            self._load()
        except Exception:
            self.failed = True


_kernels: dict = {}
_kernels_lock = threading.Lock()


def kernel(key: tuple, make_source, sync_compiles: bool = True, steady: bool = False,
           later: bool = False) -> NativeKernel:
    """The `NativeKernel` for `key`, its source made by ``make_source()`` when it is loaded
    (`steady`, `later`: see `NativeKernel._rank`)."""
    k = _kernels.get(key)
    if k is None:
        with _kernels_lock:
            k = _kernels.get(key)
            if k is None:
                k = _kernels[key] = NativeKernel(make_source, "native_" + "_".join(map(str, key)),
                                                      sync_compiles, steady, later)
    return k


# ---------------------------------------------------------------- kernels rendered from a form
# (row_forms, channel_forms, window_forms: a primitive's form traced as one fused group and
# rendered by the CPU backend, as a compiled program's group is)
_UNSUPPORTED = object()


def lowered(cache: dict, key, lower):
    """``lower()`` cached under `key` in `cache`, or None where it raised (remembered: the
    form is no group the renderers take, and the op's numpy form runs)."""
    got = cache.get(key)
    if got is None:
        try:
            got = cache[key] = lower()
        except Exception:
            got = cache[key] = _UNSUPPORTED
    return None if got is _UNSUPPORTED else got


def one_group(fn, shapes, what: str, **partition):
    """(graph, group): `fn` traced over operands of these (shape, dtype name), partitioned
    with fusion.partition's options `partition`. Raises a ValueError naming `what` unless
    the graph is one fused group."""
    from .... import dtypes
    from ....jit.tracer import trace_graph
    from ....ops.registry import Aval
    from ... import fusion
    from ....autograd.grad_mode import enable_grad
    # traced in one grad mode whatever the caller's: the form is cached for every later
    # call, and a backward (no_grad) traces bf16 widenings that do not fuse into one group
    with enable_grad():
        ctx, out = trace_graph(fn, [Aval(s, getattr(dtypes, dt)) for s, dt in shapes])
    graph = ctx.graph([o._var for o in (out if isinstance(out, (tuple, list)) else (out,))])
    items = fusion.partition(graph, **partition)
    if len(items) != 1 or not isinstance(items[0], fusion.Group):
        raise ValueError(f"{what} is not one fused group")
    return graph, items[0]


def rendered(key: tuple, nest, parallel: bool, steady: bool = False):
    """The loaded kernel of `nest` rendered by the CPU backend (a serial variant's cheapest
    entry), or None while it is not loaded."""
    from ... import backends
    fn = kernel(key, lambda: backends.get("cpu").render(nest, parallel), steady=steady).get()
    if fn is None or parallel:
        return fn
    return backends.get("cpu").fast_entry(fn)


def entry(cache: dict, key, get, serial: bool = True):
    """The entry of a loaded kernel kept in `cache` under `key`: ``get()`` (a
    `NativeKernel`'s ``get``: the dispatcher, or None while it is not loaded) once it gives
    one, a `serial` kernel's as the CPU backend's cheapest entry (`fast_entry`: no type
    resolution per call; a parallel kernel keeps its dispatcher); None while not loaded."""
    fn = cache.get(key)
    if fn is None:
        fn = get()
        if fn is not None:
            if serial:
                from ... import backends
                fn = backends.get("cpu").fast_entry(fn)
            cache[key] = fn
    return fn


_standins = threading.local()   # .stack: the fused kernels whose stand-ins this thread runs


class standing_in:
    """``with loader.standing_in(k):`` around the composition a fused kernel `k` stands for,
    run because `k` is not loaded: while `k` is coming, the kernels the composition asks for
    queue as tier 0's do, behind `k`. A failed `k` (or None) leaves the asks as they are."""

    def __init__(self, k: "NativeKernel | None"):
        self._k = k if k is not None and k.coming() else None
        self._inner = standin() if self._k is not None else None

    def __enter__(self):
        if self._inner is not None:
            _standins.__dict__.setdefault("stack", []).append(self._k)
            self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        if self._inner is not None:
            self._inner.__exit__(*exc)
            _standins.stack.pop()
        return False


def settle(deadline: float) -> bool:
    """Load every kernel an op has asked for, waiting until `deadline` (monotonic), for
    steady-state measurements and tests. True when none is left."""
    for k in list(_kernels.values()):
        if k.first is None or k.fn is not None or k.failed:
            continue
        with k.lock:
            k._start()
        thread = k.thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
    return True
