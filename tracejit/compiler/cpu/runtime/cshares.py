"""GIL-free launch of a share-form kernel's shares on tracejit's worker pool.

Why: sharepool's launch hands the pool a ctypes *Python* callback, and every GIL handoff
between the threads is a futex wake-up: 42-87 us per launch of a do-nothing kernel, so a
~220 us row kernel ran no faster in two shares than serially.

How: the kernel's module also defines (`source`; code generation runs without numba):
``pack(itab, ftab, <the kernel's arguments but share, shares>)``, a numba function that
writes each array's address and shape and each scalar into int/float tables; and
``share_entry(rec)``, a ``cfunc`` that rebuilds the arrays from the tables and calls
``kernel(..., q, nt)`` through its compiled address (``voidptr.call_at``): no Python object
on either thread. In background mode they are a module of their own (`module_source`),
built after the kernel's; calling through the address keeps numba from linking and
optimising the kernel again into it.

`CShares` launches them: pack, then the pool's ``run(nt, share_entry, records, 32)``, a
record (q, int table, float table, nt) per share. A cfunc cannot raise: the kernels these
serve raise nothing. `ChunkKernel` launches chunk kernels (codegen_chunks.py): it picks the
share count from the free cores, runs shares 1.. on the pool (GIL-free once the entry is
loaded) and share 0 itself, and makes a full reduction's one fold call.
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
    `tail`: constants the entry passes after them.

    `fold`: the kernel is a folded reduction whose last argument is ``chunk_fold``; the share
    that ends last (`voidptr.arrive`) also makes the fold call, so the caller makes none
    (a dispatcher call right after a cache sweep cost 15-18 us)."""
    if fold and (not tail or tail[-1] != 0):
        raise ValueError("cshares: a folding pair's kernel takes chunk_fold = 0 last")
    kinds = [_kind(t) for t in arg_types]
    pack = [f"@njit({'void(int64[::1], float64[::1], ' + ', '.join(arg_types) + ')'!r}, cache=CACHE)",
            f"def pack(itab, ftab, {', '.join(names)}):"]
    entry = ["@cfunc('void(voidptr)', cache=CACHE)", "def share_entry(rec):",
             "    r = carray_at(rec, (4,), np.int64)"]
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
    entry.append(f"    call_at(it[{at}], kernel, ({', '.join(call + ['r[0]', 'r[3]'] + [str(int(t)) for t in tail])},))")
    head = ["", "", "from numba import cfunc",
            "from tracejit.compiler.cpu.runtime.voidptr import call_at, carray_at, put_array, table_array"]
    if fold:
        # the counter: one more int table slot, zeroed by pack before each launch
        pack.append(f"    itab[{ni}] = 0")
        entry += [f"    if arrive(carray_at(r[1] + {8 * ni}, (1,), np.int64)) == r[3] - 1:",
                  f"        call_at(it[{at}], kernel, ({', '.join(call + ['r[3]', 'r[3]'] + [str(int(t)) for t in tail[:-1]] + ['1'])},))"]
        head.append("from tracejit.compiler.cpu.runtime.voidptr import arrive")
    head += [f"ITAB, FTAB = {at + 1}, {max(nf, 1)}", f"KERNEL_AT = {at}", f"FOLDS = {fold}", "", ""]
    return "\n".join(head + pack + ["", ""] + entry) + "\n"


def module_source(kernel_source: str, pair: str, llvm_options: tuple) -> str:
    """The entry's own module (background mode): `pair` (`source`) over the kernel of
    `kernel_source`'s module, loaded as the plan loads it (`llvm_options`). No kernel label
    in it, so plan kernels of one source share one pair module."""
    return ("# generated by tracejit: the GIL-free shares of the row kernel below (compiler/cpu/runtime/cshares.py)\n"
            "import numpy as np\nfrom numba import njit\n"
            f"KERNEL_SOURCE = {kernel_source!r}\n"
            "kernel = load_module(KERNEL_SOURCE, name_hint='row_kernel', "
            f"llvm_options={tuple(llvm_options)!r}).kernel\n" + pair)


class CShares:
    """The launch of one kernel module's ``share_entry`` in nt shares, or None from `make`
    where it cannot run. The caller holds the launch (`sharepool.try_launch`)."""

    __slots__ = ("pack", "entry", "itab", "ftab", "recs", "gp", "address", "keep", "folds", "nt")

    def __init__(self, module: dict, pack, gp, kernel_at: int):
        self.keep = (module["share_entry"], module["kernel"])   # their code lives as long as this
        self.pack = pack
        # the launch also makes a folded reduction's fold call (`source`'s `fold`)
        self.folds = bool(module.get("FOLDS", False))
        self.itab = np.zeros(module["ITAB"], np.int64)
        self.itab[module["KERNEL_AT"]] = kernel_at   # what share_entry calls
        self.ftab = np.zeros(module["FTAB"], np.float64)
        self.nt = 0
        self._records(2)
        import ctypes
        self.entry = ctypes.c_void_p(self.keep[0].address)
        self.gp = gp

    def _records(self, nt: int) -> None:
        """The share records (q, itab, ftab, nt) for q = 0 .. nt - 1."""
        recs = np.zeros((nt, 4), np.int64)
        recs[:, 0] = np.arange(nt)
        recs[:, 1] = self.itab.ctypes.data
        recs[:, 2] = self.ftab.ctypes.data
        recs[:, 3] = nt
        self.recs = recs
        self.address = recs.ctypes.data
        self.nt = nt

    @classmethod
    def make(cls, g: dict, fast_entry):
        """For `g`, a loaded module's globals holding ``pack`` and ``share_entry``, with
        ``fast_entry(dispatcher)`` the backend's cheapest callable of a dispatcher."""
        if "share_entry" not in g or "pack" not in g or "KERNEL_AT" not in g:
            return None
        gp = sharepool.pool_shares.find()
        if gp is None:
            return None
        from .voidptr import native_address
        try:
            kernel_at = native_address(g["kernel"])
        except Exception:   # (no single compiled signature: sharepool's launch runs it)
            return None
        return cls(g, fast_entry(g["pack"]), gp, kernel_at)

    def __call__(self, args: tuple, nt: int = 2) -> None:
        """``kernel(*args, q, nt)`` for q = 0 (this thread) and 1 .. nt - 1 (the pool's
        workers; those beyond them after q = 0 here)."""
        if nt != self.nt:
            self._records(nt)
        self.pack(self.itab, self.ftab, *args)
        self.gp(nt, self.entry, self.address, 32)
        sharepool.worked()


class Pending:
    """A share-form kernel's entry module (`module_source`), compiled apart from the kernel
    so that the plan does not wait 0.5-0.8 s for it. ``poll()`` gives (the `CShares` or
    None, this object while it may still come or None); calls run through sharepool's
    launch meanwhile."""

    __slots__ = ("source", "hint", "llvm_options", "fast_entry", "next_poll", "last", "__weakref__")

    # seconds between two looks at the compile (a failed compile stays None for good)
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
        """Start making the entry's module ready now rather than at the first several-share
        call (where its compile took a core from the calls it should speed up): the
        background job to wait on, or None (sync mode, or loaded already). Called by
        ``vectorized._pair_ready``."""
        from ...prepare import module_job
        return module_job(self.source, self.hint, self.llvm_options, rank)


_polled = weakref.WeakSet()   # every `Pending` (for `pending`)


def pending(since: float) -> list:
    """The pair modules (name hints) a launch asked for at or after `since` (monotonic)
    that are not loaded yet."""
    return sorted(p.hint for p in list(_polled) if p.last is not None and p.last >= since)


def ahead(kernel_source: str, pair: str, hint: str, llvm_options: tuple, kernel_job) -> None:
    """A background compile's submission: queue the pair module `Pending` will ask for
    (same source and hint: one job) at rank FIRST, right after the plan's kernels, taken
    once `kernel_job` is done."""
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
        # The GIL-free shares: cshares.CShares once loaded; `pending` until then (None:
        # sharepool.run_shares runs the shares)
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
            if self.pending is not None:
                self.pair, self.pending = self.pending.poll()
            pair = self.pair
            if pair is not None and sharepool.pool_shares.find() is not None:
                pair(args, nt)
                fold = fold and not pair.folds   # the last share to end folded
            else:
                _run_shares(self.entry, args, (0,) if fold else (), nt)
        finally:
            sharepool.end_launch()
        if fold:
            self.entry(*args, nt, nt, 1)   # no chunks of its own: the fold only

    def pair_call(self, *args) -> bool:
        """The call as two GIL-free shares, whatever share count `__call__` would use;
        False, having run nothing, where they cannot run now. For work only a cheap launch
        pays for: `__call__` without the GIL-free entry costs tens of us."""
        if self.serial or self.partial_dtype is not None or pool_threads() < 2:
            return False
        if not sharepool.try_launch():
            return False
        try:
            if self.pending is not None:
                self.pair, self.pending = self.pending.poll()
            pair = self.pair
            if pair is None or sharepool.pool_shares.find() is None:
                return False
            pair(args)
        finally:
            sharepool.end_launch()
        return True
