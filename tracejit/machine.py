"""Facts about the machine that size the CPU kernels' blocks: a core's data cache sizes.

Why: blocked kernels (a convolution's columns, BatchNorm's numpy passes) keep a block in a
core's cache between the pass that writes it and the pass that reads it; the right block
is the cache's size, which differs between machines (512 KB of L2 on this project's build
machine, 1-2 MB on newer cores). Read from Linux's sysfs once at import; `FALLBACK` where
it says nothing (another OS, a container hiding sysfs).
"""
from __future__ import annotations

import os

__all__ = ["cache_bytes", "FALLBACK", "L1_BYTES", "L2_BYTES", "L3_BYTES"]

CACHE_ROOT = "/sys/devices/system/cpu/cpu0/cache"

# Sizes in bytes used where the system does not say (a common x86 server core's).
FALLBACK = {1: 32 << 10, 2: 512 << 10, 3: 8 << 20}

_SCALE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def cache_bytes(level: int, root: str = CACHE_ROOT, default: int | None = None) -> int:
    """A core's data (or unified) cache at `level` (1, 2 or 3) in bytes, as sysfs under
    `root` gives it for CPU 0; else `default`, or `FALLBACK[level]` without one."""
    if level not in FALLBACK:
        raise ValueError(f"cache_bytes: level must be one of {sorted(FALLBACK)}, got {level!r}")
    fallback = FALLBACK[level] if default is None else default
    try:
        for entry in sorted(os.listdir(root)):
            d = os.path.join(root, entry)
            if _read(os.path.join(d, "level")) != str(level):
                continue
            if _read(os.path.join(d, "type")) not in ("Data", "Unified"):
                continue
            size = _read(os.path.join(d, "size")).upper()
            got = int(size.rstrip("KMG")) * _SCALE.get(size[-1:], 1)
            if got > 0:
                return got
    except (OSError, ValueError):
        pass
    return fallback


L1_BYTES = cache_bytes(1)
L2_BYTES = cache_bytes(2)
L3_BYTES = cache_bytes(3)
