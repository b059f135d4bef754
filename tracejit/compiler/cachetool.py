"""Managing the disk kernel cache: what it holds, clearing it, pruning it to a size cap.

``python -m tracejit cache info|clear|prune`` calls these. Each load touches its entry's
mtime, so mtime orders entries by last use. ``prune`` removes entries of other versions
(never loadable) and then the least recently used until the cache fits ``max_mb``; with
``TRACEJIT_CACHE_MAX_MB`` set, a writing process prunes after a write (at most once a
minute). Removal renames then deletes, so a reader never sees half an entry.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from .. import envflags
from . import diskcache, plancode

__all__ = ["info", "clear", "prune", "maybe_prune", "max_mb"]

_last_prune = [0.0]
_PRUNE_EVERY_S = 60.0


def max_mb() -> Optional[float]:
    """The size cap from ``TRACEJIT_CACHE_MAX_MB``, or None."""
    return envflags.number("TRACEJIT_CACHE_MAX_MB")


def _entries(root: Path) -> list:
    """[(path, bytes, last use, manifest dict or None)] of complete entries."""
    out = []
    for entry in (root / "kernels").glob("*/*"):   # (<shard>/<key>)
        if ".tmp-" in entry.name or not entry.is_dir():
            continue
        size = 0
        for dirpath, _, files in os.walk(entry):
            for name in files:
                with contextlib.suppress(OSError):
                    size += os.lstat(os.path.join(dirpath, name)).st_size
        try:
            manifest = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
            mtime = entry.stat().st_mtime
        except (OSError, ValueError):
            manifest, mtime = None, 0.0
        out.append((entry, size, mtime, manifest if isinstance(manifest, dict) else None))
    return out


def _current(manifest: Optional[dict]) -> bool:
    return manifest is not None and manifest.get("versions") == diskcache._versions()


def info(root: Optional[Path] = None) -> dict:
    """Root, entry count, total bytes, and entries per (tracejit, numba, python) version."""
    root = root or diskcache.cache_dir()
    if root is None:
        return {"root": None, "entries": 0, "bytes": 0, "versions": {}, "stale_entries": 0}
    entries = _entries(root)
    versions: Counter = Counter()
    for _, _, _, m in entries:
        v = (m or {}).get("versions") or {}
        versions[f"tracejit {v.get('tracejit', '?')}, numba {v.get('numba', '?')}, "
                 f"python {str(v.get('python', '?')).split()[0]}"] += 1
    return {"root": str(root), "entries": len(entries), "bytes": sum(e[1] for e in entries),
            "versions": dict(versions), "stale_entries": sum(1 for e in entries if not _current(e[3])),
            "max_mb": max_mb()}


def clear(root: Optional[Path] = None) -> int:
    """Remove every entry; returns how many."""
    root = root or diskcache.cache_dir()
    if root is None:
        return 0
    entries = _entries(root)
    for entry, *_ in entries:
        diskcache._discard(entry)
    # The per-graph hints (tierhints.py) describe what was on disk: they go too, and the
    # plans' compiled sources (plancode.py).
    shutil.rmtree(root / "hints", ignore_errors=True)
    shutil.rmtree(root / plancode.DIR, ignore_errors=True)
    return len(entries)


def prune(max_megabytes: Optional[float] = None, root: Optional[Path] = None) -> dict:
    """Remove entries of other versions, then least recently used ones until the cache
    holds at most `max_megabytes` (default: ``TRACEJIT_CACHE_MAX_MB``; None: no cap)."""
    root = root or diskcache.cache_dir()
    if root is None:
        return {"removed": 0, "freed_bytes": 0}
    cap = max_megabytes if max_megabytes is not None else max_mb()
    entries = _entries(root)
    removed = freed = 0
    keep = []
    for e in entries:
        if _current(e[3]):
            keep.append(e)
        else:
            diskcache._discard(e[0])
            removed, freed = removed + 1, freed + e[1]
    if cap is not None:
        shutil.rmtree(root / plancode.DIR, ignore_errors=True)   # (a warm start compiles them again)
        total = sum(e[1] for e in keep)
        for entry, size, _, _ in sorted(keep, key=lambda e: e[2]):  # oldest use first
            if total <= cap * 1024 * 1024:
                break
            diskcache._discard(entry)
            total -= size
            removed, freed = removed + 1, freed + size
    return {"removed": removed, "freed_bytes": freed}


def maybe_prune(root: Path) -> None:
    """After a write: prune to ``TRACEJIT_CACHE_MAX_MB`` if set (at most once a minute)."""
    cap = max_mb()
    if cap is None or time.monotonic() - _last_prune[0] < _PRUNE_EVERY_S:
        return
    _last_prune[0] = time.monotonic()
    with contextlib.suppress(OSError):
        prune(cap, root)
