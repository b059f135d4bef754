"""Load generated kernel modules, with an in-process cache and a verified disk cache
(design: docs/design/disk-cache-trust.md; user guide: docs/guide/caching.md).

``load_module`` turns a generated source into a module, compiled at most once per process
and, with the disk cache on, at most once per machine. Kernels are decorated
``@njit("<signature>", ..., cache=CACHE)``; the loader sets ``CACHE`` (True from a file in
the disk cache, False from memory) and ``load_module`` in the module's globals.

Layout (``cache_dir()``, mode 0o700)::

    <root>/kernels/<key[:2]>/<key>/kernel.py          the source, as given
                                  /__pycache__/*.nbi   numba's index (a pickle)
                                  /__pycache__/*.nbc   numba's compiled code (a pickle)
                                  /manifest.json       sha256 of every file above

``key`` hashes the source, the tracejit/numba/llvmlite/python versions, the CPU and the
source of every tracejit module the kernel imports (importclosure.py). Since numba's files
are pickles, they are checked against ``manifest.json`` first; a mismatch removes and
rebuilds the entry (one warning). Entries are built in a temp directory and renamed into
place, so readers see a whole entry or none.

Faults never stop a load: each logs a warning and bumps a counter in ``stats()``.
``TRACEJIT_CACHE=0`` turns the disk cache off; ``TRACEJIT_CACHE_DIR`` sets its root.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import linecache
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any

from . import cacheload, cacheroot, forkguard, importclosure, llvmopts, numbaflags, plancode
from .cpu.runtime import coreshare
from .buildfacts import versions as _versions  # a module global: tests patch it

__all__ = ["load_module", "cache_dir", "clear_memory_cache", "stats", "entry_path", "is_cached", "on_disk"]

log = logging.getLogger("tracejit")
_cache_log = logging.getLogger("tracejit.cache")  # TRACEJIT_LOG=cache: hits, misses, rebuilds, writes

_SOURCE_NAME = "kernel.py"
_MANIFEST_NAME = "manifest.json"
_MANIFEST_FORMAT = 1
_STALE_TEMP_S = 15 * 60  # no kernel compiles for this long; older temp dirs are dead
_PACKAGE = "tracejit_kernels"  # parent of the generated modules in sys.modules

# One lock for everything: numba serialises compilation anyway, and concurrent callers with
# the same source wait and then find the module in _memory.
_lock = threading.RLock()
_memory: dict[tuple[str, tuple[str, ...]], types.ModuleType] = {}  # (source, llvm options) -> module
_stats: dict[str, int] = {}
_swept: set[str] = set()


def _reset_stats() -> None:
    _stats.clear()
    _stats.update(memory_hits=0, disk_hits=0, compiles=0, corrupt_entries=0, write_failures=0)


_reset_stats()


# ----------------------------------------------------------------------------- public API


def load_module(source: str, *, name_hint: str = "kernel",
                llvm_options: tuple[str, ...] = ()) -> types.ModuleType:
    """Return the module built from `source`, compiled by numba, through the in-process and
    disk caches. `llvm_options` hold while numba compiles it and are part of the key. Errors
    raised while running the source propagate unchanged and leave nothing cached."""
    with _lock:
        module = _memory.get((source, llvm_options))
        if module is not None:
            _stats["memory_hits"] += 1
            _cache_log.debug("memory hit: %s", name_hint)
            return module
        with _switches():
            key = _key(source, llvm_options)
            modname = f"{_PACKAGE}.{_identifier(name_hint)}_{key[:20]}"
            root = cache_dir()
            # (numbaflags.lean: no cfunc wrappers, which nothing of ours calls)
            with llvmopts.applied(llvm_options), numbaflags.lean():
                module = _load_via_disk(root, key, source, modname) if root is not None else None
                if module is None:
                    _cache_log.info("compiling %s in memory (disk cache off or unusable)", modname)
                    module = _exec_module(source, modname, f"<tracejit {modname}>", cache=False)
                    _stats["compiles"] += 1
        _memory[(source, llvm_options)] = module
        return module


def _switches():
    """Shorter GIL switches (coreshare.py) while a thread other than the main one loads: its
    0.3-1 s of Python would make each of the user's numpy calls wait up to 5 ms for the GIL."""
    if threading.current_thread() is threading.main_thread():
        return contextlib.nullcontext()
    return coreshare.shorter_switches()


def entry_path(source: str, llvm_options: tuple[str, ...] = ()) -> Path | None:
    """Where the disk entry for `source` lives (it may not exist); None with the cache off."""
    root = cache_dir()
    if root is None:
        return None
    key = _key(source, llvm_options)
    return root / "kernels" / key[:2] / key


def in_memory(source: str, llvm_options: tuple[str, ...] = ()) -> bool:
    """Whether `source` is already loaded in this process (a load returns at once)."""
    # No `_lock`: a dict lookup is atomic, and the lock is held for a whole load or
    # build (a background thread's, seconds with numba's import), which this must not wait for.
    return (source, llvm_options) in _memory


def is_cached(source: str, llvm_options: tuple[str, ...] = ()) -> bool:
    """Whether loading `source` needs no compile: it is in memory, or its disk entry
    exists (a damaged entry is still caught, and rebuilt, by the load's manifest check)."""
    return (source, llvm_options) in _memory or on_disk(source, llvm_options)  # no lock: see in_memory


def import_numba(runtime: bool = False) -> None:
    """Import numba under the loads' lock: two threads importing it at once can end in
    Python's import-deadlock error. Every first import of numba outside the loads must come
    through here. `runtime`: also set up numba's runtime, which the first module loaded
    would compile. Off the main thread, with shorter GIL switches (`_switches`)."""
    with _lock, _switches():
        import numba  # noqa: F401
        if runtime:
            from numba.core.compiler_lock import global_compiler_lock
            from numba.core.registry import cpu_target
            from numba.core.runtime import rtsys
            with global_compiler_lock:
                rtsys.initialize(cpu_target.target_context)


def on_disk(source: str, llvm_options: tuple[str, ...] = ()) -> bool:
    """Whether the disk holds an entry for `source` (what another process would load), the
    in-process cache aside."""
    entry = entry_path(source, llvm_options)
    return entry is not None and (entry / _MANIFEST_NAME).exists()


def cache_dir() -> Path | None:
    """The disk cache root, created if needed; None when disabled or unusable
    (cacheroot.py: the checks, with `os` alone, for callers that must not import us)."""
    root = cacheroot.root()
    return None if root is None else Path(root)


def clear_memory_cache() -> None:
    """Forget everything held in this process (modules, counters, warn-once and
    sweep bookkeeping), so the next load goes to disk.  For tests."""
    with _lock:
        for module in _memory.values():
            sys.modules.pop(module.__name__, None)
        _memory.clear()
        cacheroot._warned.clear()
        _swept.clear()
        _reset_stats()


def stats() -> dict[str, int]:
    """Counters: memory_hits, disk_hits, compiles, corrupt_entries, write_failures."""
    with _lock:
        return dict(_stats)


def _identifier(name: str) -> str:
    name = re.sub(r"\W", "_", name) or "kernel"
    return name if not name[0].isdigit() else "_" + name


# ----------------------------------------------------------------------------- cache key


_IMPORT_RE = re.compile(r"^\s*(?:from|import)\s+(tracejit(?:\.\w+)*)", re.MULTILINE)


def _key(source: str, llvm_options: tuple[str, ...] = ()) -> str:
    # the imported tracejit modules and all they import (see importclosure.py)
    helpers = importclosure.hashes(sorted(set(_IMPORT_RE.findall(source))))
    h = hashlib.sha256(json.dumps([_versions(), helpers, list(llvm_options)], sort_keys=True).encode())
    h.update(source.encode())
    return h.hexdigest()


# ----------------------------------------------------------------------------- running a module


def _exec_module(source: str, modname: str, filename: str, *, cache: bool) -> types.ModuleType:
    """Run `source` as module `modname`; `filename` is what numba and tracebacks see."""
    # (an entry's code object is kept with the plans' (plancode.py): compiling the source
    # was a sixth of a warm load's CPU)
    code = plancode.compiled(source, filename) if cache else compile(source, filename, "exec")
    # mtime None: linecache.checkcache keeps it, so tracebacks and inspect.getsource
    # work for in-memory modules and for entries that are later moved or removed.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    if _PACKAGE not in sys.modules:
        package = types.ModuleType(_PACKAGE, "Modules generated by tracejit.")
        package.__path__ = []
        sys.modules[_PACKAGE] = package
    module = types.ModuleType(modname)
    module.__file__ = filename
    module.CACHE = cache
    module.load_module = load_module
    sys.modules[modname] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def _cached_dispatchers(module: types.ModuleType) -> list[Any]:
    """numba dispatchers defined by `module` itself with caching on."""
    from numba.core.dispatcher import Dispatcher

    return [v for v in vars(module).values()
            if isinstance(v, Dispatcher) and getattr(v.py_func, "__module__", None) == module.__name__
            and v.stats.cache_path is not None]


def _cached_cfuncs(module: types.ModuleType) -> list[Any]:
    """numba cfuncs defined by `module` itself with caching on (the GIL-free share entries
    of compiler/cpu/runtime/cshares.py): each has an index file of its own in the entry."""
    from numba.core.caching import NullCache
    from numba.core.ccallback import CFunc

    return [v for v in vars(module).values()
            if isinstance(v, CFunc) and getattr(v._pyfunc, "__module__", None) == module.__name__
            and not isinstance(v._cache, NullCache)]


# ----------------------------------------------------------------------------- disk cache


def _load_via_disk(root: Path, key: str, source: str, modname: str) -> types.ModuleType | None:
    """Load from the entry for `key`, building it if needed; None means 'compile in memory'."""
    if not _register_locator():
        return None
    kernels = root / "kernels"
    if str(kernels) not in _swept:
        _swept.add(str(kernels))
        _sweep_stale_temps(kernels)
    entry = kernels / key[:2] / key
    if entry.exists():
        module = _load_entry(entry, key, source, modname)
        if module is not None:
            return module
        _cache_log.info("rebuilding %s", entry)
    else:
        _cache_log.info("miss: compiling %s into %s", modname, entry)
    try:
        return _build_entry(entry, key, source, modname)
    except OSError as exc:
        _stats["write_failures"] += 1
        cacheroot.warn_once("write", root, "tracejit disk cache: cannot write to %s (%s); compiling in memory",
                   root, exc)
        return None


def _load_entry(entry: Path, key: str, source: str, modname: str) -> types.ModuleType | None:
    problem, manifest = _verify(entry, key, source)
    if problem is None:
        # numba's cached code names the module it was built in: load it under that name
        # (two functions with the same kernel give it different name hints).
        modname = _built_as(manifest.get("module"), key) or modname
        try:
            # A verified entry holds numba's machine code for every kernel: load it
            # without numba's registry refresh (cacheload's docstring says why that is safe).
            with cacheload.deferred_refresh():
                module = _exec_module(source, modname, str(entry / _SOURCE_NAME), cache=True)
        except Exception as exc:  # verified but numba could not use it
            problem = f"loading failed: {exc!r}"
    if problem is not None:
        _stats["corrupt_entries"] += 1
        log.warning("tracejit disk cache: discarding corrupt entry %s: %s", entry, problem)
        _discard(entry)
        return None
    if (any(sum(d.stats.cache_misses.values()) for d in _cached_dispatchers(module))
            or any(c._cache_hits == 0 for c in _cached_cfuncs(module))):
        # numba recompiled (and rewrote the entry), so it no longer matches its
        # manifest.  The module is fine; drop the entry so the next process rebuilds it.
        log.debug("tracejit disk cache: numba missed its cache in %s; discarding it", entry)
        _cache_log.info("numba recompiled %s; entry %s discarded", modname, entry)
        _discard(entry)
        _stats["compiles"] += 1
    else:
        _stats["disk_hits"] += 1
        _cache_log.info("disk hit: %s from %s", modname, entry)
        with contextlib.suppress(OSError):
            os.utime(entry)  # last use, for least-recently-used pruning (cachetool.py)
    return module


def _mkdir_private(path: Path) -> None:
    """Create `path` and any missing parents with mode 0o700 (``mkdir(parents=True)``
    gives the parents the umask's mode, e.g. 0o755)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for p in reversed(missing):
        with contextlib.suppress(FileExistsError):    # made meanwhile by a concurrent writer
            p.mkdir(mode=0o700)


def _build_entry(entry: Path, key: str, source: str, modname: str) -> types.ModuleType:
    """Compile `source` into a new entry.  OSError before the module exists means
    the cache cannot be written; errors of the source itself propagate."""
    _mkdir_private(entry.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f"{key}.tmp-{os.getpid()}-", dir=entry.parent))  # mode 0o700
    try:
        (tmp / _SOURCE_NAME).write_text(source, encoding="utf-8")
        (tmp / "__pycache__").mkdir(mode=0o700)
        module = _exec_module(source, modname, str(tmp / _SOURCE_NAME), cache=True)
        _stats["compiles"] += 1
        # From here on the module works whatever happens to the cache.
        try:
            dispatchers = _cached_dispatchers(module)
            pycache = str(tmp / "__pycache__")
            index_files = [n for n in os.listdir(pycache) if n.endswith(".nbi")]  # raises if gone
            cfuncs = _cached_cfuncs(module)
            if not dispatchers or any(d.stats.cache_path != pycache for d in dispatchers) \
                    or any(c._cache._cache_path != pycache for c in cfuncs) \
                    or len(index_files) != len(dispatchers) + len(cfuncs):
                # e.g. no cache=CACHE, a kernel numba cannot cache, NUMBA_CACHE_LOCATOR_CLASSES set
                cacheroot.warn_once("uncacheable", entry.parent.parent, "tracejit disk cache: numba did not "
                           "cache %s inside the entry; it will be recompiled next time", modname)
                return module
            _write_manifest(tmp, key, modname)
            try:
                os.rename(tmp, entry)
            except OSError:
                if not entry.exists():
                    raise
                log.debug("tracejit disk cache: %s was built by another process first", entry)
            else:
                _cache_log.info("wrote %s", entry)
                from .cachetool import maybe_prune
                maybe_prune(entry.parent.parent.parent)
                # Code objects keep the temp path; linecache serves both names.
                module.__file__ = str(entry / _SOURCE_NAME)
                linecache.cache[module.__file__] = linecache.cache[str(tmp / _SOURCE_NAME)]
        except OSError as exc:
            _stats["write_failures"] += 1
            cacheroot.warn_once("write", entry.parent.parent, "tracejit disk cache: cannot write %s (%s)",
                       entry, exc)
        return module
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left after a successful rename


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry_files(entry: Path) -> set[str]:
    """Relative paths of the files in `entry`; raises ValueError on anything but
    plain files and directories (a symlink could point numba anywhere)."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(entry):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                found.add(path.relative_to(entry).as_posix())
            elif not stat.S_ISDIR(mode):
                raise ValueError(f"{path} is not a regular file")
    return found


def _write_manifest(tmp: Path, key: str, modname: str) -> None:
    files = {rel: _sha256_file(tmp / rel) for rel in sorted(_entry_files(tmp))}
    manifest = {"format": _MANIFEST_FORMAT, "key": key, "versions": _versions(), "files": files,
                "module": modname}
    (tmp / _MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")


def _verify(entry: Path, key: str, source: str) -> tuple:
    """(why `entry` must not be run, None) or (None, its manifest) when it matches it."""
    try:
        manifest = json.loads((entry / _MANIFEST_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no manifest.json (half-written entry)", None
    except (OSError, ValueError) as exc:
        return f"unreadable manifest.json ({exc})", None
    if not isinstance(manifest, dict) or manifest.get("format") != _MANIFEST_FORMAT \
            or manifest.get("key") != key:
        return "manifest.json is not for this key", None
    if manifest.get("versions") != _versions():
        return f"built by other versions: {manifest.get('versions')!r}", None
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "malformed manifest.json", None
    if files.get(_SOURCE_NAME) != hashlib.sha256(source.encode()).hexdigest():
        return "manifest.json is for another source", None
    try:
        on_disk = _entry_files(entry) - {_MANIFEST_NAME}
        if on_disk != set(files):
            return f"files differ from manifest.json: {sorted(on_disk ^ set(files))}", None
        for rel, digest in files.items():
            if _sha256_file(entry / rel) != digest:
                return f"{rel} does not match its hash", None
    except (OSError, ValueError) as exc:
        return str(exc), None
    return None, manifest


def _built_as(name, key: str) -> str | None:
    """`name`, the module a verified entry was built under (its manifest's), if valid."""
    ok = (isinstance(name, str) and name.startswith(_PACKAGE + ".") and name.endswith(key[:20])
          and name[len(_PACKAGE) + 1:].isidentifier() and name not in sys.modules)
    return name if ok else None


def _discard(entry: Path) -> None:
    """Remove an entry; renamed away first so that no reader sees it half-deleted."""
    doomed = entry.with_name(f"{entry.name}.tmp-{os.getpid()}-dead-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, doomed)
    except OSError:
        doomed = entry
    shutil.rmtree(doomed, ignore_errors=True)


def _sweep_stale_temps(kernels: Path) -> None:
    """Remove temp dirs of processes killed mid-build (SIGKILL skips `finally`)."""
    cutoff = time.time() - _STALE_TEMP_S
    with contextlib.suppress(OSError):   # (no kernels dir yet, or it vanished: nothing to sweep)
        for shard in kernels.iterdir():
            for path in shard.iterdir():
                if ".tmp-" in path.name and path.lstat().st_mtime < cutoff:
                    log.debug("tracejit disk cache: sweeping stale %s", path)
                    shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- numba locator


@functools.lru_cache(maxsize=1)
def _register_locator() -> bool:
    """Put our locator first in numba's list for function caches: without it
    NUMBA_CACHE_DIR would send our cache files outside the entries and their manifest, and
    an unwritable entry would fall back to numba's user-wide cache. Ours accepts only files
    inside our entries and never creates parent directories."""
    try:
        from numba.core.caching import CompileResultCacheImpl, InTreeCacheLocator
    except ImportError as exc:  # numba moved its internals: run without the disk cache
        log.warning("tracejit disk cache disabled: numba caching internals not found (%s)", exc)
        return False

    class _EntryLocator(InTreeCacheLocator):
        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> "_EntryLocator | None":
            path = Path(py_file)
            if path.name != _SOURCE_NAME or path.parent.parent.parent.name != "kernels":
                return None
            return cls(py_func, py_file)

        def ensure_cache_path(self) -> None:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.get_cache_path(), 0o700)

    current = CompileResultCacheImpl._locator_classes
    if not any(c.__name__ == "_EntryLocator" for c in current):
        CompileResultCacheImpl._locator_classes = [_EntryLocator, *current]
    return True


# ----------------------------------------------------------------------------- fork safety
# A fork in the middle of a background load would leave `_lock` held by a thread the child
# lacks, so a fork waits for the load (rank 1: a planning thread may load under its lock).
forkguard.hold(_lock, rank=1)
