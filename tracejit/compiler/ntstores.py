"""Streaming (non-temporal) stores for the outputs of large fused CPU kernels: the policy
saying when a kernel uses them (the intrinsics it calls are in ntstores_llvm.py).

Why
---
An ordinary store to a line that is not in the cache first reads the line from memory
(read for ownership), then writes it back: a kernel computing one output moves its bytes
twice. glibc's ``memcpy`` (the copy the benchmark's bandwidth bound is measured with)
writes large copies with non-temporal stores, which send whole 64-byte lines to memory
without reading them: on one test machine 29.5 GB/s for a copy against 15.9 GB/s for
``dst = src * 2``. A kernel can do the same: compute a block of its output into a small
buffer that stays in L1, then send the buffer's whole lines to the output with
non-temporal vector stores (`stream_block`).

Measured (Intel Xeon @ 2.80 GHz, AVX-512, 48 MiB L3 shared with the host, 2 cores shared
with other work, load 2.7-3.8; min of 6 rounds, variants alternating in one process):

- one thread (CPU time), 4M float32: ``o = a + b + c`` 6.0 ms with ordinary stores,
  5.0-5.6 ms streaming; the GELU chain 6.5 / 6.8 ms (no gain on one core: its loads and
  arithmetic, not the stores, bound it there);
- producer then consumer (``o = a + b + c``, then a kernel reading ``o``), one thread:
  streaming loses while the producer's arrays fit in the caches (256K elements, 4 MiB:
  0.35 -> 0.47 ms for the pair: the consumer then reads ``o`` from memory instead of the
  cache) and wins from 1M elements (16 MiB: 3.20 -> 2.94 ms; 4M: 12.6 -> 11.3 ms); with
  two threads, 1M elements still lost (1.74 -> 1.94 ms), 2M-3M (32-48 MiB) broke even,
  and 4M won (GELU producer 7.0 -> 5.5 ms);
- the compiled GELU forward (tj.script, 4M float32, this module's kernels against
  ``TRACEJIT_STREAM_STORES=0`` in one process, five runs, load 3.3-5.2): 5.35-6.11 ms
  instead of 5.60-6.78 ms on one thread (2-13% less in every run), 2.96-6.20 instead of
  3.33-6.45 ms on two (+12% to -31% per run, with the other core busy or not); at 256K
  elements (below the threshold) 0.18-0.21 ms either way.
- where the last-level cache holds the kernel's arrays, streaming loses: on a Xeon VM
  whose sysfs L3 is 260 MiB (the 4M GELU forward's 64 MiB stay below the threshold), the
  forward made to stream (the threshold lowered to 32 MiB) took 1.26-1.33 / 1.34-1.40 ms
  min / median on two threads against 1.12-1.19 / 1.17-1.24 ms with ordinary stores
  (alternating fresh processes).
- other ways to spare the outputs' reads for ownership lost too there (two threads, one
  process alternating, min / median): each 1-4K-element block
  computed into a stack buffer and written with ``rep movsb`` (fast strings write whole
  lines without reading them and keep them cached) ran a 3-in-3-out map at 4M float32 in
  3.9-4.1 / 4.1-4.8 ms against 3.2-3.3 / 3.3-3.4 with ordinary stores, and a 64 MiB
  scale at 17-20 against 27 GB/s; ``cldemote`` of each block's output lines after writing
  them: 6.5-7.5 against 3.1 ms; ``prefetchw`` of the output lines two blocks ahead: 3.7-4.0
  against 3.1. Arrays on huge pages throughout (2 MiB-aligned, ``MADV_HUGEPAGE``) against
  numpy's (87% of each 16 MiB array on huge pages) or none: the GELU kernels the same.
  There, the 4M GELU kernels run as fast as kernels of the same arrays with almost no
  arithmetic (``x*y + z``; ``((x*y + z)**2).sum()`` with its three gradients): the bytes
  they move, not their arithmetic, set their time.

Hence the policy (`stream_min`): a kernel streams when the bytes it touches (every
array operand and output, per element, times the element count) reach the last-level
cache's size (read from sysfs; `DEFAULT_LLC` when unknown): smaller kernels leave their
outputs in the cache for the next kernel of the step, larger ones would have had them
evicted before anyone read them anyway. ``TRACEJIT_STREAM_STORES=0`` renders kernels
without streaming stores (the plain loops).

Results never depend on it: a streamed value has the same bits as a stored one, computed
by the same loop body; only the way the bytes travel to memory changes. (Reductions keep
ordinary stores: see codegen_cpu.stream_min.)

How (ntstores_llvm.py)
----------------------
`stream_block` is a numba intrinsic whose lines are 64-byte LLVM vector stores with
``!nontemporal`` metadata and 64-byte alignment (``vmovntps`` on x86: one zmm or two
ymm stores; ``stnp`` on AArch64). Marking the kernel's own scalar stores non-temporal
would not do: LLVM's loop vectorizer vectorizes a non-temporal store only where the target
calls the vector store legal, which on x86 needs the vector's full alignment
(``isLegalNTStore``), unknown for a store into a numpy array; and a misaligned
non-temporal vector store faults.
`stream_block` therefore peels the elements before the output's first 64-byte boundary
and after its last whole line to ordinary stores, and streams the lines between. The
non-temporal stores are weakly ordered: `stream_fence` (``sfence`` on x86) at the end of
each parallel chunk makes them visible before the threads join.
"""
from __future__ import annotations

import math
from pathlib import Path

from .. import envflags

__all__ = ["LINE", "BLOCK", "DEFAULT_LLC", "llc_bytes", "enabled", "stream_min", "IMPORT"]

LINE = 64                 # bytes per cache line: the unit of a streaming store
# Elements per output block computed into the L1 buffer before it is streamed. 1024
# float32 = 64 lines: the two partial lines at the edges of a block whose output does not
# start on a line boundary are 3% of its lines. Blocks of 256 elements were slower
# (6.9-9.0 ms against 6.1-6.8 for the GELU chain on one core: per-block work and partial
# lines), 4096 no faster than 1024.
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
