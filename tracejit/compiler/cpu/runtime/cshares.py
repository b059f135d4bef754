"""GIL-free launch of a share-form kernel's two shares on tracejit's worker pool.

Why: sharepool's pair launch (`sharepool.run_shares`) hands the worker pool (workpool.py)
a ctypes *Python* callback: each share takes the GIL to unbox the kernel's arguments, and
every GIL handoff between the two threads is a futex wake-up of the other vCPU. On the
2-core VM this cost 42-87 us per launch of a do-nothing kernel (median 60-120 us right
after a GEMM; a C share's round trip on a polling worker is 1.3-2.8 us),
so a LayerNorm + GELU forward row kernel of ~220 us (MLP step, 256 x 1024) ran no faster
in two shares (193-236 us) than serially (209-234); with the shares below: 116-144 us.

How: the kernel's module also defines (`source`; the module imports numba, this one does not:
code generation runs without it):

- ``pack(itab, ftab, <the kernel's arguments but share, shares>)``: a numba function
  (GIL held: one unboxing, on the launching thread) writing each array's address and shape
  (``voidptr.put_array``), and each integer, into the int64 table `itab`, each float into
  the float64 table `ftab`;
- ``share_entry(rec)``: a numba ``cfunc`` taking the address of a record (q, itab, ftab),
  rebuilding the arrays from the tables (``voidptr.table_array``) and calling ``kernel(..., q, 2)``
  through the address of its compiled code (``voidptr.call_at``; `CShares` puts it in the
  int table): no Python object, no GIL, on either thread.

In sync mode both are in the kernel's module (one compile). In background mode they are
a module of their own (`module_source`), built by the compile workers after the kernel's so
that no switch waits for them: that module loads the kernel's module (from the disk cache,
where the kernel's job put it) and its ``share_entry`` calls that compiled kernel (MLP step,
worker CPU: forward kernel+pair 1.50 s against 0.55 s for the pair alone, backward 2.33
against 0.76). Through its address, not as numba calls a dispatcher: numba links the
callee's whole library into the caller's, and LLVM optimises and emits the kernel again
(Transformer's three pairs compiled as one worker does, after their kernels: 1.74-1.80 s
linked, 1.11 s through the address).

`CShares` launches them: pack, then the pool's ``run(2, share_entry, records, 24)`` runs
record q on the caller (q = 0) and the pool's worker (q = 1), exactly as `run_shares` does with
its Python callback. Arrays are C-contiguous (the kernels' signatures say so) and stay
alive in the caller's frame for the whole launch. A cfunc cannot raise: the kernels these
serve raise nothing (error_model numpy, no bounds checks; an allocation failure inside a
share would end the process, as it would in any nogil numba kernel run by a C thread).

`ChunkKernel` launches chunk kernels (codegen_chunks.py): a serial ``nogil`` numba function
that runs share ``t`` of ``nt`` of its chunks. It picks the share count (the cores other
processes leave us: compiler/cpu/runtime/coreshare.py), hands shares 1.. to the worker
pool (`sharepool.run_shares`; or, for a flat kernel of two shares, its GIL-free pair: `CShares`), runs share 0
itself, waits, and for a full reduction makes the one fold call (the partial results are
an array it allocates per launch, so a reduction's shares all write into one and the fold
sees every share's chunks; a GIL-free pair's last share makes that call itself). Each
share launched through sharepool unboxes its arguments under the GIL (a few us) and
releases it for the loop. One launch at a time: a second Python thread launching meanwhile
runs its kernel on one thread instead of waiting.
"""
from __future__ import annotations

import re
import weakref
from typing import Callable, Optional

import numpy as np

from . import sharepool
from .sharepool import pool_threads, run_shares as _run_shares
from ...codegen_chunks import PARTIALS
from ...codegen_cpu import column_partial_len

__all__ = ["source", "module_source", "CShares", "Pending", "Ready", "ahead", "pending", "ChunkKernel",
           "pool_threads"]


_NUMPY = {"boolean": "bool_"}   # numba's type names that numpy spells otherwise
_ARRAY = re.compile(r"Array\((\w+), (\d), 'C'(, readonly=True)?\)$")
_SLICE = re.compile(r"(\w+)\[((?::, )*)::1\]$")


def _kind(t: str) -> tuple:
    """('array', dtype, ndim) / ('int',) / ('float',) for one numba type of a signature."""
    m = _ARRAY.match(t)
    if m:
        return "array", m.group(1), int(m.group(2))
    m = _SLICE.match(t)
    if m:
        return "array", m.group(1), m.group(2).count(":") + 1
    if t == "int64":
        return ("int",)
    if t == "float64":
        return ("float",)
    raise ValueError(f"cshares: no table form for argument type {t!r}")


def source(arg_types: list, names: list, tail: tuple = (), fold: bool = False) -> str:
    """``pack`` and ``share_entry`` (module docstring) for a kernel ``kernel(<names>, share,
    shares, <tail>)`` whose arguments before (share, shares) have the numba types `arg_types`;
    `tail`: constants the entry passes after them (a flat chunk kernel's ``chunk_fold`` = 0:
    codegen_chunks.py).

    `fold`: the kernel is a folded reduction whose last argument is ``chunk_fold``: the
    share that ends last (a counter in the int table that `pack` zeroes, `voidptr.arrive`)
    also makes the fold call ``kernel(<names>, 2, 2, 1)``, so the launch returns with the
    result folded (`CShares.folds`) and the caller makes no fold call of its own. Why:
    that call came right after the kernel had swept the caches, a numba dispatcher call
    unboxing a dozen arguments there: 15-18 us (GELU loss over 4M float32)."""
    if fold and (not tail or tail[-1] != 0):
        raise ValueError("cshares: a folding pair's kernel takes chunk_fold = 0 last")
    kinds = [_kind(t) for t in arg_types]
    pack = [f"@njit({'void(int64[::1], float64[::1], ' + ', '.join(arg_types) + ')'!r}, cache=CACHE)",
            f"def pack(itab, ftab, {', '.join(names)}):"]
    entry = ["@cfunc('void(voidptr)', cache=CACHE)", "def share_entry(rec):",
             "    r = carray_at(rec, (3,), np.int64)"]
    body, call = [], []
    ni = nf = 0
    for name, k in zip(names, kinds):
        if k[0] == "array":
            # its address and shape: slots ni .. ni + nd (one intrinsic each way, voidptr's
            # put_array / table_array: a slot at a time cost numba's lowering ~3 ms a slot)
            _, dt, nd = k
            pack.append(f"    put_array(itab, {ni}, {name})")
            body.append(f"    {name} = table_array(it, {ni}, {nd}, np.{_NUMPY.get(dt, dt)})")
            ni += 1 + nd
        elif k[0] == "int":
            pack.append(f"    itab[{ni}] = {name}")
            body.append(f"    {name} = it[{ni}]")
            ni += 1
        else:
            pack.append(f"    ftab[{nf}] = {name}")
            body.append(f"    {name} = ft[{nf}]")
            nf += 1
        call.append(name)
    # the kernel's compiled code is called through its address (`voidptr.call_at`), which
    # `CShares` writes into the int table's last slot once (pack leaves it alone)
    at = ni + 1 if fold else ni
    entry += [f"    it = carray_at(r[1], ({at + 1},), np.int64)",
              f"    ft = carray_at(r[2], ({max(nf, 1)},), np.float64)"] + body
    entry.append(f"    call_at(it[{at}], kernel, ({', '.join(call + ['r[0]', '2'] + [str(int(t)) for t in tail])},))")
    head = ["", "", "from numba import cfunc",
            "from tracejit.compiler.cpu.runtime.voidptr import call_at, carray_at, put_array, table_array"]
    if fold:
        # the counter: one more int table slot, zeroed by pack before each launch
        pack.append(f"    itab[{ni}] = 0")
        entry += [f"    if arrive(carray_at(r[1] + {8 * ni}, (1,), np.int64)) == 1:",
                  f"        call_at(it[{at}], kernel, ({', '.join(call + ['2', '2'] + [str(int(t)) for t in tail[:-1]] + ['1'])},))"]
        head.append("from tracejit.compiler.cpu.runtime.voidptr import arrive")
    head += [f"ITAB, FTAB = {at + 1}, {max(nf, 1)}", f"KERNEL_AT = {at}", f"FOLDS = {fold}", "", ""]
    return "\n".join(head + pack + ["", ""] + entry) + "\n"


def module_source(kernel_source: str, pair: str, llvm_options: tuple) -> str:
    """The pair's own module (background mode): `pair` (`source`) over the kernel of
    `kernel_source`'s module, loaded as the plan loads it (`llvm_options`) through the
    ``load_module`` that diskcache puts in every generated module. The kernel's source is
    part of this one's, so its disk entry's key follows the kernel's. No kernel label in it:
    two plan kernels of one source (the MLP's r0 and r1) share one pair module, one job."""
    return ("# generated by tracejit: the GIL-free pair of the row kernel below (compiler/cpu/runtime/cshares.py)\n"
            "import numpy as np\nfrom numba import njit\n"
            f"KERNEL_SOURCE = {kernel_source!r}\n"
            "kernel = load_module(KERNEL_SOURCE, name_hint='row_kernel', "
            f"llvm_options={tuple(llvm_options)!r}).kernel\n" + pair)


class CShares:
    """The two-share launch of one kernel module's ``share_entry`` (module docstring), or
    None from `make` where it cannot run (no worker pool of two, the module lacks it).
    The caller holds the launch (`sharepool.try_launch`), so one launch at a time uses the
    tables."""

    __slots__ = ("pack", "entry", "itab", "ftab", "recs", "gp", "address", "keep", "folds")

    def __init__(self, module: dict, pack, gp, kernel_at: int):
        self.keep = (module["share_entry"], module["kernel"])   # their code lives as long as this
        self.pack = pack
        # the launch also makes a folded reduction's fold call (`source`'s `fold`)
        self.folds = bool(module.get("FOLDS", False))
        self.itab = np.zeros(module["ITAB"], np.int64)
        self.itab[module["KERNEL_AT"]] = kernel_at   # what share_entry calls
        self.ftab = np.zeros(module["FTAB"], np.float64)
        self.recs = np.zeros(6, np.int64)      # (q, itab, ftab) for q = 0 and 1
        self.recs[3] = 1
        self.recs[1] = self.recs[4] = self.itab.ctypes.data
        self.recs[2] = self.recs[5] = self.ftab.ctypes.data
        import ctypes
        self.entry = ctypes.c_void_p(self.keep[0].address)
        self.address = self.recs.ctypes.data
        self.gp = gp

    @classmethod
    def make(cls, g: dict, fast_entry):
        """For `g`, the globals of a loaded module holding ``pack`` and ``share_entry`` (the
        kernel's own, or the pair's module), with ``fast_entry(dispatcher)`` the backend's
        cheapest callable of a dispatcher."""
        if "share_entry" not in g or "pack" not in g or "KERNEL_AT" not in g:
            return None
        gp = sharepool.pool_pair.find()
        if gp is None:
            return None
        from .voidptr import native_address
        try:
            kernel_at = native_address(g["kernel"])
        except Exception:   # (no single compiled signature: sharepool's launch runs it)
            return None
        return cls(g, fast_entry(g["pack"]), gp, kernel_at)

    def __call__(self, args: tuple) -> None:
        """``kernel(*args, q, 2)`` for q = 0 (this thread) and 1 (the pool's worker)."""
        self.pack(self.itab, self.ftab, *args)
        self.gp(2, self.entry, self.address, 24)
        sharepool.worked()


class Pending:
    """A share-form kernel's pair module (`module_source`), compiled apart from the kernel:
    `pack` and the cfunc cost numba 0.5-0.8 s per module, which the plan should not wait
    for. ``poll()`` gives
    (the `CShares` or None, this object while it may still come or None): in background
    mode the compile workers build it (prepare.module_when_ready) and calls run through
    sharepool's launch meanwhile; in sync mode it is compiled at the first poll."""

    __slots__ = ("source", "hint", "llvm_options", "fast_entry", "next_poll", "last", "__weakref__")

    # seconds between two looks at the compile (a failed compile stays None for good, so it
    # must not be asked for at every call; a look is two dict lookups and two environment
    # reads, the source's hash cached by its str): at 0.25 s the pairs of a cold MLP came
    # in 0.26 s after their module was loaded
    POLL_S = 0.05
    SUFFIX = "_pair"    # of the kernel's name hint

    def __init__(self, kernel_source: str, pair: str, hint: str, llvm_options: tuple, fast_entry):
        self.source = module_source(kernel_source, pair, llvm_options)
        self.hint = hint + self.SUFFIX
        self.llvm_options = llvm_options
        self.fast_entry = fast_entry
        self.next_poll = 0.0
        self.last = None     # the latest poll that found no pair (`pending`)
        _polled.add(self)

    def poll(self) -> tuple:
        import time
        now = time.monotonic()
        self.last = now
        if now < self.next_poll:
            return None, self
        self.next_poll = now + self.POLL_S
        from ...prepare import module_when_ready
        try:
            mod = module_when_ready(self.source, self.hint, self.llvm_options)
        except Exception:   # the kernel itself loaded: keep sharepool's launch for good
            self.last = None
            return None, None
        if mod is None:
            return None, self        # compiling (a failed compile warns and stays None)
        self.last = None
        return CShares.make(vars(mod), self.fast_entry), None

    def prepare(self, rank=None):
        """Start making the pair's module ready now rather than at the first two-share
        call: the background job to wait on (`prepare.module_job`; `rank` places a new one, as
        workers.submit's), or None where there is none (sync mode, or loaded already). An
        eager op's kernel asks this when it loads
        (compiler/cpu/kernels/vectorized.py): asked at the first two-share call, the pair's compile (0.5-0.8 s
        in a worker) ran during the calls that followed, and the worker took one of the two
        cores those calls were splitting their work over."""
        from ...prepare import module_job
        return module_job(self.source, self.hint, self.llvm_options, rank)


_polled = weakref.WeakSet()   # every `Pending` (for `pending`)


def pending(since: float) -> list:
    """The pair modules (their name hints) a launch has asked for at or after `since` (a
    time.monotonic() reading) that are not loaded yet: a step that launches a row kernel
    runs it in two shares through sharepool's slower launch until its pair is in
    (bench_tiers waits for these with the eager kernels, kernels/vectorized.pending)."""
    return sorted(p.hint for p in list(_polled) if p.last is not None and p.last >= since)


def ahead(kernel_source: str, pair: str, hint: str, llvm_options: tuple, kernel_job) -> None:
    """A background compile's submission: queue the pair module that `Pending` will ask for
    (same source and name hint: one job) right after the plan's kernels, taken by a worker
    once `kernel_job` (the kernel's compile, whose module it loads) is done. Rank FIRST, so
    before the jobs asked for later (the eager ops' and native kernels, which serve tier 0):
    MLP step, empty cache, training on: at the first two-share call the pairs were compiled
    last, ~9-11 s after the first call; queued with rank EAGER, at 7.7-7.9 s."""
    from ...prepare import compile_mode, module_when_ready
    from ...ranks import FIRST
    if compile_mode(None) != "background":   # (the pair is in the kernel's module)
        return
    module_when_ready(module_source(kernel_source, pair, llvm_options), hint + Pending.SUFFIX,
                      llvm_options, rank=FIRST, after=kernel_job)


class Ready:
    """`Pending`'s form for a kernel whose own module holds the pair (sync mode): ``poll()``
    gives its `CShares` (or None where it cannot run) at once."""

    __slots__ = ("kernel", "fast_entry")

    def __init__(self, kernel, fast_entry):
        self.kernel = kernel
        self.fast_entry = fast_entry

    def poll(self) -> tuple:
        g = getattr(getattr(self.kernel, "py_func", None), "__globals__", {})
        return CShares.make(g, self.fast_entry), None


class ChunkKernel:
    """A chunk kernel as the plan calls it: with the nest's calling convention."""

    __slots__ = ("kernel", "entry", "partial_dtype", "partial_size", "serial", "unguarded", "pair", "pending")

    def __init__(self, kernel: Callable, entry: Callable, partial_dtype: Optional[str], serial: bool,
                 partial_size: tuple = ("fixed", PARTIALS), pair=None):
        self.kernel = kernel            # the numba dispatcher (for its metadata)
        self.unguarded = kernel
        self.entry = entry              # its compiled entry point (no type dispatch)
        self.partial_dtype = None if partial_dtype is None else np.dtype(
            "bool" if partial_dtype == "bool" else partial_dtype)
        self.serial = serial            # the serial-variant call: always one share
        self.partial_size = partial_size  # codegen_chunks.ChunkSpec.partial_size
        # A flat kernel's GIL-free pair (compiler/cpu/runtime/cshares.py: its two shares on this thread and
        # the pool's worker, no Python on either): cshares.CShares once loaded; `pending` its
        # cshares.Pending / Ready until then (None: sharepool.run_shares runs the shares)
        self.pair = None
        self.pending = pair

    def __call__(self, *args):
        nt = 1 if self.serial else pool_threads()
        fold = self.partial_dtype is not None
        if fold:
            kind, v = self.partial_size
            size = v if kind == "fixed" else column_partial_len(args[v]) if kind == "columns" else args[v]
            args = args + (np.empty(size, self.partial_dtype),)
        if nt == 1 or not sharepool.try_launch():
            # one share (also when another thread is launching: no waiting for it)
            return self.entry(*args, 0, 1, 1) if fold else self.entry(*args, 0, 1)
        try:
            if nt == 2 and self.pending is not None:
                self.pair, self.pending = self.pending.poll()
            pair = self.pair
            if nt == 2 and pair is not None and sharepool.pool_pair.find() is not None:
                pair(args)
                fold = fold and not pair.folds   # the pair's last share folded
            else:
                _run_shares(self.entry, args, (0,) if fold else (), nt)
        finally:
            sharepool.end_launch()
        if fold:
            self.entry(*args, nt, nt, 1)   # no chunks of its own: the fold only

    def pair_call(self, *args) -> bool:
        """The call as the GIL-free pair's two shares (this thread and the pool's worker),
        whatever share count the free cores would give `__call__`; False, having run
        nothing, where the pair cannot run now (not loaded yet, one core free, another
        thread's launch holding the pool, a folded reduction).

        For work that only this launch pays for (a few us on a worker awake after a
        product): `__call__` without the pair runs each share through a Python callback
        (sharepool.run_shares), tens of us."""
        if self.serial or self.partial_dtype is not None or pool_threads() < 2:
            return False
        if not sharepool.try_launch():
            return False
        try:
            if self.pending is not None:
                self.pair, self.pending = self.pending.poll()
            pair = self.pair
            if pair is None or sharepool.pool_pair.find() is None:
                return False
            pair(args)
        finally:
            sharepool.end_launch()
        return True
