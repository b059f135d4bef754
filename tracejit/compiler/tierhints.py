"""What a previous process learned about a graph's tiers (compiler/tiers.py reads it).

``<cache root>/hints/<key>.ondisk`` says a graph's kernels have all been on disk once (a
graph without it starts its compile workers before planning; with it, the second call
waits for the loads); ``<key>.variants`` lists kernel variants a run needed that no plan
lists, which the next background compile plans with the others. A hint is only advice:
files in the private cache root, read defensively.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Optional

from . import cacheroot  # (not diskcache: a first call reads a hint; see cacheroot.py)

__all__ = ["key", "mark_on_disk", "on_disk", "on_disk_marker", "touch", "variants", "add_variant"]

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


def _path(k: Optional[str], ext: str) -> Optional[str]:
    """The file of graph `k` with this extension, or None (the cache off, or no key)."""
    root = cacheroot.root() if k else None
    return None if root is None else os.path.join(root, _DIR, f"{k}{ext}")


def mark_on_disk(k: Optional[str]) -> None:
    """Record that every kernel of the graph with key `k` is on disk (errors are ignored)."""
    path = _path(k, ".ondisk")
    if path is not None:
        touch(path)


def touch(path: str) -> None:
    """Create the marker file `path` and its folder where missing (errors are ignored: a
    marker is only advice)."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError:
        pass


def on_disk_marker(k: Optional[str]) -> Optional[str]:
    """The file `mark_on_disk` creates for graph `k` (for a worker that finishes the graph's
    kernels after the program's exit, compiler/finish.py); None with the cache off."""
    return _path(k, ".ondisk")


def on_disk(k: Optional[str]) -> bool:
    """Whether a previous run found or put every kernel of graph `k` on disk (the cache may
    have been pruned since: this is advice, the disk check decides)."""
    path = _path(k, ".ondisk")
    return path is not None and os.path.exists(path)


def variants(k: Optional[str]) -> list:
    """The variants recorded for graph `k` by `add_variant`: [(kernel label, layouts,
    parallel)]; [] when none or unreadable."""
    path = _path(k, ".variants")
    if path is None:
        return []
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
        return [(str(label), tuple(str(x) for x in layouts), bool(par)) for label, layouts, par in data]
    except (OSError, ValueError, TypeError):
        return []


def add_variant(k: Optional[str], label: str, layouts: tuple, parallel: bool) -> None:
    """Record that a run of graph `k` needed kernel `label`'s variant for `layouts`
    (atomically; errors are ignored)."""
    path = _path(k, ".variants")
    have = variants(k)
    item = (label, tuple(layouts), bool(parallel))
    if path is None or item in have:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps([[v[0], list(v[1]), v[2]] for v in have + [item]]))
        os.replace(tmp, path)
    except OSError:
        pass
