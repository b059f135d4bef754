"""What a previous process learned about a graph's tiers: its tier-0 call's cost and the
cost of loading its kernels from a warm disk (compiler/tiers.py decides with it).

Running a first call on tier 0 is right when an eager call is cheap, wrong when it is not
(an LSTM whose eager step costs 20 s loads its kernels in 2-3 s). So a run records both
figures, in CPU seconds of the working thread (wall time follows the machine's load), in
``<cache root>/hints/<key>.json``, and the next first call loads at once when its tier-0
call took longer. A marker (``hints/load-first``) says some graph ever preferred loading,
so a first call hashes its graph (1-5 ms) only then (`any_prefers_loading`).

``<key>.ondisk`` says a graph's kernels have all been on disk once (a graph without it
starts its compile workers before planning); ``<key>.variants`` lists kernel variants a
run needed that no plan lists, which the next background compile plans with the others.
A hint is only advice: JSON in the private cache root, read defensively.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Optional

from . import cacheroot  # (not diskcache: a first call reads a hint; see cacheroot.py)

__all__ = ["key", "read", "write", "prefer_loading", "any_prefers_loading", "mark_on_disk",
           "on_disk", "on_disk_marker", "touch", "LOAD_MARK", "variants", "add_variant"]

_DIR = "hints"
LOAD_MARK = "load-first"   # in <root>/hints: some graph's hint prefers loading
# numba's import in CPU seconds: the hint's load figure counts at least this much, since a
# background thread often finds numba imported already and its loads alone read too low.
NUMBA_IMPORT_CPU_S = 0.15
# How much more a tier-0 call must cost than the loads for a first call to load at once.
LOAD_MARGIN = 2.0


def key(graph, grad_mode: bool) -> str:
    """A key for `graph` (its text form: ops, shapes, dtypes) in this tracejit/Python."""
    try:
        import tracejit
        version = str(tracejit.__version__)
    except Exception:
        version = "0"
    text = f"{version}\n{sys.version}\n{grad_mode}\n{graph}"
    return hashlib.sha256(text.encode()).hexdigest()


def _path(k: Optional[str], ext: str = ".json") -> Optional[str]:
    """The file of graph `k` with this extension, or None (the cache off, or no key)."""
    root = cacheroot.root() if k else None
    return None if root is None else os.path.join(root, _DIR, f"{k}{ext}")


def _write(path: str, data) -> None:
    """`data` as JSON into `path`, atomically (raises OSError)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data))
    os.replace(tmp, path)


def read(k: str) -> Optional[dict]:
    """The hint recorded for key `k`, or None (none, unreadable, malformed)."""
    path = _path(k)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(
            isinstance(data.get(f), (int, float)) for f in ("tier0_s", "load_s")):
        return None
    return data


def write(k: str, tier0_s: float, load_s: float) -> None:
    """Record the figures for key `k` (atomically; errors are ignored: it is a hint). Each
    keeps the least of this run's and the recorded one, so a busy run or a one-off cost
    does not flip the next process's choice."""
    path = _path(k)
    if path is None:
        return
    old = read(k)
    if old is not None:
        tier0_s, load_s = min(tier0_s, old["tier0_s"]), min(load_s, old["load_s"])
    try:
        _write(path, {"tier0_s": tier0_s, "load_s": load_s})
    except OSError:
        return
    if prefer_loading({"tier0_s": tier0_s, "load_s": load_s}):
        touch(os.path.join(os.path.dirname(path), LOAD_MARK))


def prefer_loading(hint: Optional[dict]) -> bool:
    """Whether a first call should load the kernels at once rather than run tier 0."""
    # The first call loads only when tier 0 costs `LOAD_MARGIN` times the loads: a process
    # that loads at once never measures tier 0 again, so a close call must stay on tier 0.
    return hint is not None and hint["tier0_s"] > LOAD_MARGIN * hint["load_s"]


def any_prefers_loading() -> bool:
    """Whether any graph's hint has preferred loading in this cache (one stat); False with
    the cache off."""
    root = cacheroot.root()
    return root is not None and os.path.exists(os.path.join(root, _DIR, LOAD_MARK))


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
        _write(path, [list(v[:1]) + [list(v[1]), v[2]] for v in have + [item]])
    except OSError:
        pass
