"""Allocator tuning: freed array memory is kept for reuse instead of handed back to the OS.

Why: glibc serves each allocation above ``M_MMAP_THRESHOLD`` (128 KiB at start; it only
adapts after such a block is freed, and not reliably for numpy's allocation pattern)
with fresh ``mmap`` pages, so every new array of a few hundred KiB costs one page fault
per 4 KiB, the kernel zeroing each page. Training steps allocate such arrays all the time
(activations, gradients, optimizer temporaries). Measured on the two-layer step
(64x1000 @ 1000x100 ..., SGD): 1.16 ms and 267 page faults per step untuned, 0.52 ms and
none with the thresholds below; the GELU loss over 4M floats showed the same.

What: ``mallopt(M_MMAP_THRESHOLD, 32 MiB)`` (blocks up to 32 MiB come from the heap and
are reused) and ``mallopt(M_TRIM_THRESHOLD, 256 MiB)`` (up to 256 MiB of free memory at
the top of the heap is kept rather than returned). This is process-wide, glibc only, and
done once at ``import tracejit``; ``TRACEJIT_MALLOC_TUNING=0`` turns it off (the memory
a process keeps is then returned to the OS sooner, at the cost above).
"""
from __future__ import annotations

import ctypes
import sys

from .envflags import ProcessTuning

__all__ = ["tune_allocator", "allocator_tuned"]

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
