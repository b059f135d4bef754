"""Kernels still compiling when the program exits: finished into the disk cache, within a cap.

Why: a run shorter than its compiles used to kill its workers at exit, and the next process
started those compiles over, so short runs never got a warm cache.

How: at a normal exit (``atexit``, Ctrl-C included) the pool hands its work over
(`hand_off`): every unfinished job, with the markers to create once its kernels are on disk
(`when_cached`), goes to ``<finish dir>/<worker pid>.json`` (the worker learns the dir from
``TRACEJIT_COMPILE_FINISH_DIR``) and its stdin closes.
The worker finishes its current job, then the file's jobs, creates the markers, deletes
the file and exits. It runs in a session of its own, writes only the cache, and SIGALRM
ends it at the cap (``TRACEJIT_COMPILE_FINISH`` seconds, default `DEFAULT_CAP_S`; 0 kills
the workers at exit). A program killed by a signal hands nothing over.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Optional

from .. import envflags

__all__ = ["DEFAULT_CAP_S", "cap_s", "when_cached", "forget", "hand_off", "finish_file", "run",
           "start_finishing"]

DEFAULT_CAP_S = 60.0
_DIR = "finish"

# token -> (marker path, [(source, llvm_options)]): created once every module is on disk
_marks: dict = {}
_marks_lock = threading.Lock()
_tokens = iter(range(1, 1 << 62))


def cap_s() -> float:
    """How long after the exit the workers may go on compiling (0: not at all)."""
    t = envflags.number("TRACEJIT_COMPILE_FINISH")
    return DEFAULT_CAP_S if t is None else max(0.0, t)


def finish_dir(root: Optional[str]) -> Optional[str]:
    """Where the hand-over files of workers started with cache root `root` go."""
    return None if root is None else os.path.join(root, _DIR)


def finish_file(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.json")


def when_cached(marker: str, modules: list) -> int:
    """Create the empty file `marker` once every (source, llvm_options) of `modules` is in
    the disk cache, also after exit; a token for `forget`, once the caller did it itself."""
    token = next(_tokens)
    with _marks_lock:
        _marks[token] = (marker, [[src, list(opts)] for src, opts in modules])
    return token


def forget(token: Optional[int]) -> None:
    with _marks_lock:
        _marks.pop(token, None)


def hand_off(pool) -> list:
    """At exit: give every job of `pool` not yet done to its workers, to finish after we
    are gone. Returns the workers' Popen objects (no kill, no wait); [] when there is
    nothing to finish, no cap, or no disk cache (then the caller kills the workers)."""
    from . import cacheroot
    from .worker_process import _Worker
    cap, root = cap_s(), cacheroot.root()
    if cap <= 0 or root is None:
        return []
    pool.closed = True   # (dispatchers take no more jobs)
    pool.take_queued()
    slots = [i for i, w in enumerate(pool.workers) if w is not None and w.proc.poll() is None
             and w.finish_dir is not None]
    busy = {i: pool.current[i] for i in slots if pool.current[i] is not None}
    # every job not done: queued, held by a dispatcher (waiting for a worker's start-up, an
    # idle core, its prerequisite), or in flight on a worker we do not hand over
    inflight = {id(j) for j in busy.values()}
    queued = [j for j in pool.unfinished() if id(j) not in inflight]
    if not queued and not busy:
        return []
    if not slots:
        try:
            w = _Worker()   # (started at exit only to finish the queued jobs)
        except (OSError, ValueError):
            return []
        slots, pool.workers = [0], [w] + list(pool.workers[1:])
    # Each queued job goes to the worker that compiles its prerequisite (`Job.after`),
    # else to the one with the least source to compile so far.
    load = {i: len(busy[i].source) if i in busy else 0 for i in slots}
    given: dict = {i: [] for i in slots}
    owner = {id(j): i for i, j in busy.items()}
    for job in queued:
        i = owner.get(id(job.after)) if job.after is not None else None
        if i is None:
            i = min(slots, key=lambda k: load[k])
        given[i].append(job)
        owner[id(job)] = i
        load[i] += len(job.source)
    with _marks_lock:
        marks = list(_marks.values())
    deadline = time.time() + cap
    procs = []
    for i in slots:
        w = pool.workers[i]
        path = finish_file(w.finish_dir, w.proc.pid)
        data = {"deadline": deadline, "jobs": [{"source": j.source, "name_hint": j.name_hint,
                                                "llvm_options": list(j.llvm_options), "cache_dir": root}
                                               for j in given[i]],
                "marks": marks}
        try:
            os.makedirs(w.finish_dir, mode=0o700, exist_ok=True)
            tmp = f"{path}.tmp"
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                           encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            continue   # (this worker is killed with the others)
        try:
            w.proc.stdin.close()   # its loop ends after the current job, and finds the file
        except (OSError, ValueError):
            pass
        pool.workers[i] = None
        procs.append(w.proc)
    return procs


# ---- in the worker ---------------------------------------------------------------------
_started = threading.Event()


def start_finishing(path: str) -> bool:
    """In a worker whose parent handed work over (`path` exists): leave the parent's
    session and arm the cap, once; False when there is no hand-over."""
    if _started.is_set():
        return True
    try:
        with open(path, encoding="utf-8") as f:
            deadline = float(json.load(f)["deadline"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    _started.set()
    try:
        os.setsid()   # no SIGHUP/SIGINT from the terminal the program ran in
    except OSError:
        pass
    left = deadline - time.time()
    if left <= 0:
        os._exit(0)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGALRM, signal.SIG_DFL)   # (a fresh worker's already)
    signal.setitimer(signal.ITIMER_REAL, left)   # the kernel ends us at the cap
    return True


def run(path: str) -> None:
    """In the worker, its stdin at end: compile the handed-over jobs, create the markers
    whose modules are all there, delete the file. Errors are swallowed: nobody is left."""
    if not start_finishing(path):
        return
    from . import diskcache, tierhints
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for job in data.get("jobs", ()):
            if job.get("cache_dir"):
                os.environ["TRACEJIT_CACHE_DIR"] = job["cache_dir"]
                os.environ.pop("TRACEJIT_CACHE", None)
            try:
                diskcache.load_module(job["source"], name_hint=job["name_hint"],
                                      llvm_options=tuple(job.get("llvm_options", ())))
            except Exception:
                continue
        for marker, modules in data.get("marks", ()):
            if all(diskcache.on_disk(src, tuple(opts)) for src, opts in modules):
                tierhints.touch(marker)
    except Exception:
        pass
    finally:
        try:
            os.remove(path)
        except OSError:
            pass
