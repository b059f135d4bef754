"""Streaming (non-temporal) stores for the outputs of large fused CPU kernels: the policy
saying when a kernel uses them (the intrinsics it calls are in ntstores_llvm.py; design:
docs/design/streaming-stores.md).

A kernel streams when the bytes it touches reach the last-level cache's size
(`stream_min`); results never depend on it (same bits, same loop body), only the way the
bytes travel to memory. ``TRACEJIT_STREAM_STORES=0`` renders the plain loops.
"""
from __future__ import annotations

import math
from pathlib import Path

from .. import envflags

__all__ = ["LINE", "BLOCK", "DEFAULT_LLC", "llc_bytes", "enabled", "stream_min", "IMPORT"]

LINE = 64                 # bytes per cache line: the unit of a streaming store
# Elements per output block computed into the L1 buffer before it is streamed: 1024 float32
# is 64 lines, so a misaligned block's two partial lines are 3% (256 was slower).
BLOCK = 1024
DEFAULT_LLC = 32 << 20    # when sysfs does not say
# What a streaming kernel's source imports (the intrinsics: ntstores_llvm.py, which
# imports numba; this module does not, so rendering a kernel's source need not).
IMPORT = "from tracejit.compiler.ntstores_llvm import stack_buffer, stream_block, stream_fence"


def llc_bytes() -> int:
    """The size of the largest cache of cpu0 (sysfs), or `DEFAULT_LLC`."""
    best = 0
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in root.glob("index*"):
            text = (idx / "size").read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        best = 0
    return best or DEFAULT_LLC


_LLC = None


def enabled() -> bool:
    """Whether generated kernels may use streaming stores (``TRACEJIT_STREAM_STORES``)."""
    return not envflags.is_off("TRACEJIT_STREAM_STORES")


def stream_min(bytes_per_element: int) -> int | None:
    """The element count from which a kernel touching `bytes_per_element` bytes per
    element (its array operands and outputs) streams its outputs, or None where it never
    does (turned off). The kernel compares its size argument with it at run time."""
    global _LLC
    if not enabled() or bytes_per_element <= 0:
        return None
    if _LLC is None:
        _LLC = llc_bytes()
    return max(1, math.ceil(_LLC / bytes_per_element))
