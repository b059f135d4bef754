"""The CPU backend's one kernel loader: when a kernel an eager call or a plan asks for is
compiled and loaded, for the elementwise kernels made from scalar rules (vectorized.py)
and the hand-written ones (`NativeKernel`: the backend's registered implementations of
ops whose numpy form makes many passes, compiler/cpu/implementations.py).

The first call never pays a compile (0.2-1 s per kernel) or numba's import. In background
mode (the default) a kernel is compiled by the compile workers (compiler/workers.py:
other processes) into the disk cache and loaded in a thread of its own, started at the
op's first call a second or more after its first (`go_now`); calls run the numpy form
until then, so results never depend on whether a kernel ran (the tests run both). With
``TRACEJIT_COMPILE=sync`` (the test suite, benchmarks) the first call loads a kernel on
the spot, compiling a hand-written one in this process if the disk cache does not hold it
yet. ``TRACEJIT_EAGER_KERNELS=0`` turns every kernel here off. `settle` (with
vectorized.settle) waits for every kernel asked for, for steady-state measurements.
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

__all__ = ["NativeKernel", "kernel", "takes", "floats", "standing_in", "enabled", "go_now", "note_ask", "settle"]



# ---------------------------------------------------------------- the loading policy
def enabled() -> bool:
    return envflags.enabled("TRACEJIT_EAGER_KERNELS")


def _sync_mode() -> bool:
    """TRACEJIT_COMPILE=sync asks for no background compiles (compiler/tiers.py); eager
    never compiles on the caller's time, so then it only loads kernels already on disk."""
    return envflags.value("TRACEJIT_COMPILE").strip().lower() == "sync"


# The preparation thread starts at the op's first call this long after its first (not
# before: numba's import, or a worker's compile, would compete with the user's first step
# for the GIL and the cores; and starting a thread in the first call cost it up to a
# scheduler slice under load).
# (Starting at the op's next call 0.2 s later was too early: an LSTM step calls the same
# op every time step, and its first warm-disk step went from ~0.9 s to 2.7-3.2 s.)
_GO_AFTER_S = 1.0
# ... but an op first called `_GO_AFTER_S` or more after the process's first ask (a kernel
# variant a later step asks for: the LSTM step's compiled form asked for a second
# index_add_rows variant once its cross-entropy kernels were in, 10.5 s into training)
# starts at its next call: numba's import and the first step are behind, and the second
# call still tells a recurring op from a one-off (its kernel's job came 1.1 s later, with
# the worker idle meanwhile and every other kernel the step asks for in).
_first_ask = None   # time.monotonic() of this process's first op call that asked (`go_now`)


def noted_first(now: float) -> float:
    """An op's first call asking for its kernel at `now` (the process's first ask, if it
    is: then numba's import is scheduled, `_warm_later`); returns `now`."""
    global _first_ask
    if _first_ask is None:
        _first_ask = now
        _warm_later()
    return now


# numba's import, the bulk of a kernel loader's first load (0.14 of 0.18 s of CPU, cache
# warm), happens `_GO_AFTER_S` after the process's first ask on a timer of its own rather
# than in the loader an op's next call starts: a program that pauses meanwhile (a sleep,
# I/O, a data loader's wait) has it done by then, and its loaders only load from the disk
# cache. Its steps no longer share the GIL with the import: the pygcn script's runs just
# after a 3 s pause took 18-30 ms while the import ran in them, 7 ms after it. Which
# kernels load and when is unchanged (no kernel's state is touched here).
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
        # under the loads' lock (a loader thread importing numba meanwhile can fail with
        # Python's import-deadlock error), with numba's runtime, which the first kernel
        # loaded compiles with LLVM (37 of a first load's 67 ms)
        from ... import diskcache
        diskcache.import_numba(runtime=True)
    except Exception:  # a loader meets the same failure and keeps the op on numpy
        pass


def go_now(first: float, now: float, after: float | None = None) -> bool:
    """Whether an op whose first call (asking for its kernel) came at `first`, called again
    at `now`, starts its kernel's loader: `after` (`_GO_AFTER_S`) after its first call, or at
    once when that came `after` or more after the process's first ask."""
    after = _GO_AFTER_S if after is None else after
    return now - first >= after or (_first_ask is not None and first - _first_ask >= after)


def note_ask(holder) -> float:
    """An op's call that found its kernel not loaded (a `_Preparation`, a loader.NativeKernel):
    `holder`'s ``last`` (time.monotonic() of the latest such call, or None) and ``gap`` (the
    longest time between two) move on, as a compile job's ``asked`` reads them
    (compiler/workers.ASKED_WITHIN_S); a `_Preparation`'s ``outside`` becomes True at an ask
    outside a tier-0 forward (`outside`). Returns the call's time."""
    if getattr(holder, "outside", True) is False and outside():
        holder.outside = True
    now = time.monotonic()
    last = holder.last
    if last is not None and now - last > holder.gap:
        holder.gap = now - last
    holder.last = now
    return now


def _reread_thread_count() -> None:
    """Have the thread policy (tracejit/compiler/cpu/runtime/coreshare.py) read the machine afresh once the
    compile workers (separate processes, which it counts as others) are done: else the
    count made over their compiles, one thread on two CPUs, holds for up to a sampling
    interval after `settle`. Only where workers were started in this process (the
    reading takes 0.1 s)."""
    if coreshare.ENABLED and coreshare.workers_started():
        coreshare.core_share.reread()



# ---------------------------------------------------------------- hand-written kernels
# (a set of dtypes: `dtype.name` is a numpy property costing 1.6 us, 15 ns this way; the
# native byte order only, the order the kernels' signatures mean)
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
    ``@njit("<signature>", cache=CACHE)``), loaded on demand; ``get()`` is the callable or None.
    `source` may be a function making it: it runs when the kernel is loaded, not in the op's
    first call (a source that depends on the CPU asks llvmlite, whose import took 1.5-4.8 s
    under load). ``sync_compiles=False``: sync mode loads the kernel only from the disk cache
    (looked up once) and never compiles it in the call; for a kernel that merely speeds up
    what BLAS does already (the GEMM template's serial entry), whose 0.5-0.8 s compile would otherwise land
    in a compiled function's first call. `source` may also make a rendered kernel's spec
    (``.source``, ``.llvm_options``, ``.parallel``: kernels/row_forms.py), loaded through
    the CPU backend as a compiled plan's kernel is."""

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
        # the fused kernels (still on their way) whose stand-ins asked for it (`standing_in`):
        # with no ask outside, a STEADY kernel then queues at rank LATER (`_rank`), and is
        # held once they are all in (`_asked`)
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
                self._demote()
        with self.lock:
            if self.first is None:
                self.first = noted_first(now)
            elif go_now(self.first, now, _GO_AFTER_S):
                self._start()
        return None

    def load_now(self) -> bool:
        """Load the kernel now in any compile mode, compiling it in this process into the
        disk cache if that does not hold it yet (a `sync_compiles=False` kernel too): for a
        set-up step that must see the kernels a steady state runs (`choice.load_kernels`).
        Whether it is loaded; the op keeps its numpy form where it failed. A kernel an
        earlier sync-mode call gave up on (not on disk then) is tried again."""
        if self.fn is None and enabled():
            with self.lock:
                if self.fn is None:
                    self._load()
        return self.fn is not None

    def coming(self) -> bool:
        """Whether an op has asked for this kernel and it is still being compiled or loaded
        in the background (not loaded, not failed, not sync mode, where `get` loads it in
        the call). A fallback kernel asked for now would be queued behind this one and
        arrive after it (compiler/cpu/kernels/attention_kernels.py's row kernels)."""
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
        compiled step runs at every call as well, LATER for one only a few steps wait on
        (`later`), else EAGER, or LATER while only tier-0 forwards asked for it. Why the
        last: a compiled function's plan fuses the ops it runs on tier 0 into kernels of its
        own, so the compiled step may never ask for such a kernel (the MLP step's LayerNorm
        kernels, forward and backward: 0.5 s of one worker's CPU, came before the
        cross-entropy kernels the step waits for). A plan that calls it (the MLP's skinny
        GEMM) or eager code asks outside, and the job moves up to EAGER then (`_promote`).
        A STEADY kernel asked for only by tier 0 and by the stand-in of a fused kernel still
        compiling (`standing_in`: BatchNorm's and max-pooling's kernels, which the CNN's
        compiled step asks for only until its fused BatchNorm-and-pool kernels are in) queues
        at LATER too: its ~1.2 s of worker CPU came before those fused kernels, which then
        made it idle, and held the step's last kernels back by as much (`_demote`)."""
        from ... import workers
        if self.steady and not (self.stood_in and self.outside is False):
            return workers.STEADY
        if self.later or self.outside is False:
            return workers.LATER
        return workers.EAGER

    def _promote(self) -> None:
        """Move its queued job up to its rank now (`_rank`: an ask outside tier 0 came)."""
        job = self.job
        if job is None or job.done():
            return
        from ... import workers
        rank = self._rank()
        if rank < workers.LATER:
            workers.promote(job, rank)

    def _asked(self) -> tuple:
        """Its job's ``asked`` (compiler/workers.py `Job.asked`): the op's latest ask and the
        longest gap between two; once every fused kernel whose stand-in asked for it is in,
        and nothing else did, no op will ask again: the job is held at once, not 2 s after
        (CNN: max-pooling's scatter kernel, 0.44 s of worker CPU, compiled beside the
        compiled step after every kernel it asks for was in)."""
        if self.stood_in and self.outside is False and all(k.fn is not None for k in self.stood_in):
            return (-math.inf, self.gap)
        return (self.last, self.gap)

    def _demote(self) -> None:
        """Move its queued job down to its rank now (`_rank`: asked for in a stand-in)."""
        job = self.job
        if job is None or job.done():
            return
        from ... import workers
        rank = self._rank()
        if rank == workers.LATER:
            workers.demote(job, rank)

    def _prepare(self) -> None:
        try:
            from ... import diskcache, workers
            if not diskcache.is_cached(self.source, self._options()):
                if diskcache.cache_dir() is None:
                    self.failed = True  # nowhere to compile in the background
                    return
                # Rank EAGER, as kernels/vectorized's eager kernels: numpy runs the op meanwhile,
                # and asked for while a compiled function runs tier 0 they serve that tier 0,
                # which its FIRST jobs end. MLP step, empty cache, one worker: the LayerNorm and
                # cross-entropy kernels (1.5-1.9 s of it) ran after the switch, before fused
                # Adam and the row kernels' pairs, which the compiled step does use.
                # Rank STEADY for a kernel a compiled step runs at every call as well (the
                # recurrent layers' loops, convolution's fold/unfold, BatchNorm, pooling,
                # ReLU's backward): ahead of the EAGER ones (workers.py).
                # Put back to rank LATER when its op stopped asking (workers.ASKED_WITHIN_S).
                # Rank LATER from the start for a kernel that only a few steps wait on and
                # that must not hold back those the others do (`later`: the GEMM template's configurations).
                # Rank LATER too, until an ask outside a tier-0 forward (`_rank`).
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
    (`steady`: a compiled step runs it at every call too; `later`: queued behind every
    other kernel; see `NativeKernel`)."""
    k = _kernels.get(key)
    if k is None:
        with _kernels_lock:
            k = _kernels.get(key)
            if k is None:
                k = _kernels[key] = NativeKernel(make_source, "native_" + "_".join(map(str, key)),
                                                      sync_compiles, steady, later)
    return k


_standins = threading.local()   # .stack: the fused kernels whose stand-ins this thread runs


class standing_in:
    """``with loader.standing_in(k):`` around the composition a fused kernel `k` stands for,
    run because `k` is not loaded: while `k` is still compiling or loading (`coming`), the
    kernels the composition asks for ask as tier 0's do (compiler/cpu/kernels/vectorized.py `standin`), so
    they queue behind `k` and the kernels the compiled step keeps asking for (`_rank`). A
    `k` that failed (or None: the dtype has no kernel) leaves the asks as they are: the
    composition is then what the step runs for good."""

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
    """Load every kernel an op has asked for (starting loaders that wait for the op's next
    call), waiting until `deadline` (time.monotonic()); compiler/cpu/kernels/vectorized.py's `settle` calls
    it so steady-state measurements and tests see these kernels too. True when none is left."""
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
