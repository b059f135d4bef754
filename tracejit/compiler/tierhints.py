"""What a previous process learned about a graph's tiers (compiler/tiers.py reads it).

``<cache root>/hints/<key>.ondisk`` says a graph's kernels have all been on disk once: a
graph without it starts its compile workers before planning; with it, the second call
waits for the loads. A hint is only advice: a marker file in the private cache root.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from typing import Optional

from . import cacheroot  # (not diskcache: a first call reads a hint; see cacheroot.py)

__all__ = ["key", "mark_on_disk", "on_disk", "on_disk_marker", "touch"]

_DIR = "hints"


def key(graph, grad_mode: bool) -> str:
    """A key for `graph` (its text form: ops, shapes, dtypes) in this tracejit/Python."""
    try:
        import tracejit
        version = str(tracejit.__version__)
    except Exception:
        version = "0"
    text = f"{version}\n{sys.version}\n{grad_mode}\n{graph}"
    return hashlib.sha256(text.encode()).hexdigest()


def on_disk_marker(k: Optional[str]) -> Optional[str]:
    """The file saying that every kernel of graph `k` has been on disk (a worker that
    finishes the graph's kernels after the program's exit creates it too, compiler/finish.py);
    None with the cache off or no key."""
    root = cacheroot.root() if k else None
    return None if root is None else os.path.join(root, _DIR, f"{k}.ondisk")


def mark_on_disk(k: Optional[str]) -> None:
    """Record that every kernel of the graph with key `k` is on disk (errors are ignored)."""
    path = on_disk_marker(k)
    if path is not None:
        touch(path)


def touch(path: str) -> None:
    """Create the marker file `path` and its folder where missing (errors are ignored: a
    marker is only advice)."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        open(path, "a").close()


def on_disk(k: Optional[str]) -> bool:
    """Whether a previous run found or put every kernel of graph `k` on disk (the cache may
    have been pruned since: this is advice, the disk check decides)."""
    path = on_disk_marker(k)
    return path is not None and os.path.exists(path)
