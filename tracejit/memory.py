"""Allocator tuning: freed array memory is kept for reuse instead of handed back to the OS.

Why: glibc serves each allocation above ``M_MMAP_THRESHOLD`` (128 KiB at start) with fresh
``mmap`` pages, so every new array of a few hundred KiB costs a page fault per 4 KiB, and
training steps allocate such arrays all the time (the two-layer step: 1.16 ms untuned,
0.52 ms with the thresholds below).

What: ``mallopt(M_MMAP_THRESHOLD, 32 MiB)`` and ``mallopt(M_TRIM_THRESHOLD, 256 MiB)``, so
blocks up to 32 MiB come from the heap and are reused and free memory at the top of the
heap is kept. Process-wide, glibc only, done once at ``import tracejit``;
``TRACEJIT_MALLOC_TUNING=0`` turns it off.
"""
from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

from .envflags import ProcessTuning

_refcount = sys.getrefcount

__all__ = ["tune_allocator", "allocator_tuned", "placed_empty", "line_empty", "sole_padded_view", "free_kept", "ALIGN_MIN",
           "OutputSlot", "kept_refs"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


def _set_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's mallopt; other C libraries differ
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


tune_allocator = ProcessTuning("TRACEJIT_MALLOC_TUNING", _set_thresholds,
                               "Apply the thresholds above (glibc on Linux, unless "
                               "``TRACEJIT_MALLOC_TUNING=0``); True once they apply.")


def allocator_tuned() -> bool:
    """Whether `tune_allocator` changed the C allocator's thresholds in this process."""
    return tune_allocator.applied


# ---------------------------------------------------------------------------------------
# Large kernel outputs: on a cache line, at a page offset away from the kernel's operands
#
# numpy places a large array 16 bytes past a 16-byte boundary, and arrays allocated one
# after another sit at nearly the same page offset: in a fused kernel streaming them,
# vector accesses split across lines and loads wait on stores with matching low 12 bits
# ("4K aliasing"). Aligned and 1-3 KiB apart, the GELU loss kernel takes ~14% less time. Only
# large buffers are placed (ALIGN_MIN).
ALIGN_MIN = 8 << 20       # bytes: buffers from this size on are placed
PAGE = 4096
LINE = 64
_U8 = np.dtype(np.uint8)


def placed_empty(shape: tuple, dtype, ref=None, slot: int = 0, slots: int = 1):
    """An uninitialized C-contiguous array like ``numpy.empty(shape, dtype)``; from
    `ALIGN_MIN` bytes on, one that starts on a 64-byte line at a page offset away from
    array `ref`'s: output `slot` of `slots` of one kernel is ``(slot + 1) / (slots + 1)``
    of a page past `ref` (rounded down to a line), so the outputs are apart from the
    kernel's operand and from each other. The array is then a view of a one-page-larger
    byte buffer that only it holds (`sole_padded_view` recognizes it)."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    if nbytes < ALIGN_MIN:
        return np.empty(shape, dtype)
    raw = np.empty(nbytes + PAGE, np.uint8)
    start = _placed_start(raw, dtype, ref, slot, slots)
    if start is None:
        return np.empty(shape, dtype)
    return np.ndarray(shape, dtype, raw, start)


def _placed_start(raw, dtype, ref, slot: int, slots: int):
    """The byte offset in `raw` (one page longer than the array) where `placed_empty`'s
    output `slot` of `slots` starts for operand `ref`; None where no offset fits."""
    # (addresses through .ctypes: half the cost of __array_interface__, 1.2 against 2.5 us)
    ref_off = ref.ctypes.data if isinstance(ref, np.ndarray) else 0
    step = PAGE * (slot + 1) // (slots + 1)
    target = (ref_off + step) % PAGE // LINE * LINE
    start = (target - raw.ctypes.data) % PAGE
    if start % dtype.itemsize:       # (a heap block is at least 16-byte aligned: never)
        return None
    return start


# The arrays `OutputSlot`s keep between calls, id -> bytes: the slot's reference does not
# count as sharing memory (it hands the array out again only once nothing else holds it),
# so `kept_refs` leaves it out. At most KEEP_MAX bytes in all: what glibc keeps of freed
# heap memory anyway.
_KEPT: dict = {}
_KEPT_BASE: dict = {}      # id of a kept array's byte buffer -> id of the kept array
_kept_bytes = [0]
_kept_lock = threading.Lock()
KEEP_MAX = TRIM_THRESHOLD


def kept_refs(arr) -> int:
    """1 when an `OutputSlot` keeps `arr` for reuse (a reference of no consequence), else 0."""
    return id(arr) in _KEPT


class OutputSlot:
    """One large output of one kernel call in a compiled plan: `placed_empty`, except that
    the array of the slot's previous call is handed out again once nothing else holds it
    or its memory, instead of a new one from the allocator.

    Why: right after a kernel has streamed tens of MiB, the Python around it runs cold,
    and a new placed buffer cost 30-40 us there against ~6 us for checking the kept
    array's reference counts. The slot keeps up to one array alive between calls; all
    slots together at most `KEEP_MAX` bytes."""

    __slots__ = ("slot", "slots", "out", "key", "shape", "dtype", "ref_id")

    def __init__(self, slot: int = 0, slots: int = 1):
        self.slot = slot
        self.slots = slots
        self.out = None
        self.key = None       # (shape, dtype) of the kept array
        self.shape = self.dtype = None   # the objects of that key, as the plan passed them
        self.ref_id = 0       # id of the operand its placement was computed for

    def take(self, shape: tuple, dtype, ref=None):
        """An uninitialized array as ``placed_empty(shape, dtype, ref, slot, slots)``."""
        out = self.out
        # (3: the slot, this local and getrefcount's argument; the buffer's: out.base too.
        # A plan passes the same shape and dtype objects each call: compared by identity
        # first, no tuple built; on caches a kernel has just swept each step counts)
        if out is not None and _refcount(out) == 3 and (
                (self.shape is shape and self.dtype is dtype) or self.key == (shape, dtype)):
            raw = out.base
            if _refcount(raw) == 3:
                if id(ref) == self.ref_id:
                    return out
                start = _placed_start(raw, dtype, ref, self.slot, self.slots)
                if start is not None:       # placed for this operand, in the same buffer
                    return self._keep(np.ndarray(shape, dtype, raw, start), shape, dtype, ref)
        new = placed_empty(shape, dtype, ref, self.slot, self.slots)
        if new.base is None:        # small: not placed, not kept
            return new
        return self._keep(new, shape, dtype, ref)

    def _keep(self, new, shape, dtype, ref):
        self._drop()
        with _kept_lock:
            if _kept_bytes[0] + new.nbytes > KEEP_MAX:
                return new          # no room: this call's array is the caller's alone
            _KEPT[id(new)] = new.nbytes
            _KEPT_BASE[id(new.base)] = id(new)
            _kept_bytes[0] += new.nbytes
        self.out, self.key, self.ref_id = new, (shape, dtype), id(ref)
        self.shape, self.dtype = shape, dtype
        return new

    def _drop(self, _kept=_KEPT, _bases=_KEPT_BASE, _total=_kept_bytes, _lock=_kept_lock):
        # (bound as defaults: `__del__` may run at exit, when module globals are gone)
        out = self.out
        if out is not None:
            self.out = None
            with _lock:
                _total[0] -= _kept.pop(id(out), 0)
                _bases.pop(id(out.base), None)

    def __del__(self):
        self._drop()


def free_kept(arr) -> bool:
    """Whether `arr` is an `OutputSlot`'s kept array, writeable, that nothing holds but the
    slot and the caller's one reference, nor any other view of its memory: then it is the
    caller's own, found in one dict look-up and two reference counts (the general checks
    cost 12-18 us on cold caches, where autograd asks this of each returned gradient)."""
    # (4: the slot, the caller's reference, this argument and getrefcount's; the buffer's
    # 2: arr.base and getrefcount's)
    return (id(arr) in _KEPT and _refcount(arr) <= 4 and _refcount(arr.base) <= 2
            and arr.flags.writeable)


def line_empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array like ``numpy.empty(shape, dtype)`` that starts on
    a 64-byte line at any size (`sole_padded_view` recognizes it too), for arrays two
    threads write in neighbouring blocks, so no edge line passes between the cores."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    raw = np.empty(nbytes + LINE, np.uint8)
    return np.ndarray(shape, dtype, raw, (-raw.ctypes.data) % LINE)


def sole_padded_view(arr, extra_refs: int = 0) -> bool:
    """Whether `arr` is a `placed_empty` or `line_empty` array whose byte buffer nothing else holds: its
    memory is then as much its own as an array's without a base (`arr.base`, this
    function's local and getrefcount's argument are the buffer's references; plus
    `extra_refs`; and an `OutputSlot`'s kept array over the same buffer when `arr` is
    another view of it)."""
    base = arr.base
    # (``dtype is``: ``== np.uint8`` converts the type first, ~6 us on caches a kernel has
    # just swept; numpy's built-in dtypes are singletons)
    return (type(base) is np.ndarray and base.dtype is _U8 and base.base is None
            and base.ndim == 1 and 0 <= base.nbytes - arr.nbytes <= PAGE
            and sys.getrefcount(base) <= 3 + extra_refs + _kept_other(base, arr))


def _kept_other(base, arr) -> int:
    """1 when an `OutputSlot` keeps an array over `base` other than `arr` (a plan returned a
    reshape of its kept output: the kept array is no sharer of the reshape), else 0."""
    k = _KEPT_BASE.get(id(base))
    return k is not None and k != id(arr)
