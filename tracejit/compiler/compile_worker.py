"""A compile worker process: ``python -m tracejit.compiler.compile_worker``.

The parent (`workers.CompilePool`) writes one JSON job per line on our stdin, a kernel
module's source with its name hint and LLVM options; we compile it through the disk cache
(`diskcache.load_module`, which writes a verified entry) and answer one JSON line on stdout:
``{"id", "ok", "seconds", "compiled"}`` or ``{"id", "ok": false, "error"}`` (and one
``{"ready": true}`` line first, once our start-up is done: numba's import, a warm-up
compile). The parent then loads the entry from disk (a few ms) instead of compiling (0.1-2
s, under numba's global lock, which would stall its own threads).

We never outlive the parent, but for a capped hand-over: stdin closing (the parent exited,
even by SIGKILL) ends the loop, and a watchdog thread exits when we are re-parented (the
parent died while we were compiling), unless the parent left us its unfinished jobs at a
normal exit (finish.py): then we compile them into the cache and exit, at the latest at
its cap. SIGINT is ignored: Ctrl-C in a terminal reaches the whole process group, and
the parent decides when we stop (it kills us at exit).

``TRACEJIT_COMPILE_WORKER_FAULT`` (tests only) injects faults: ``crash`` exits on the first
job, ``hang`` sleeps forever, ``error`` answers with an error, ``corrupt`` damages the entry
it wrote (the parent's manifest check must catch it).
"""
from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time

from .. import envflags
from . import finish


def _watch_parent(ppid: int, handed: str) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            if handed and finish.start_finishing(handed):
                return   # the parent left us its jobs: the main loop finishes them (capped)
            os._exit(0)


def _corrupt_entry(source: str, llvm_options: tuple) -> None:
    from . import diskcache
    entry = diskcache.entry_path(source, llvm_options)
    if entry is None:
        return
    for dirpath, _, files in os.walk(entry):
        for name in files:
            if name.endswith(".nbc"):
                with open(os.path.join(dirpath, name), "ab") as f:
                    f.write(b"garbage")


def _warm_up() -> None:
    """Pay numba's one-off costs before the first job: its import and the set-up of its CPU
    target and typing tables, which the first compile of a process builds (measured: a
    first tiny kernel 1.9 s, the next one 0.19 s, under load). A pool started ahead
    (`workers.prestart`) does this while the parent is still planning; otherwise it is
    time the first job would have taken anyway."""
    try:
        import numba
        import numpy as np

        @numba.njit("void(float32[::1], float32[::1])", nogil=True, cache=False)
        def _k(a, out):  # pragma: no cover - compiled, never called
            for i in range(a.shape[0]):
                out[i] = a[i] * np.float32(2.0) + np.float32(1.0)
    except Exception:  # a real job reports whatever is wrong
        pass


# The cyclic garbage collector's thresholds while we compile (gen0, gen1, gen2): numba's
# compile of one kernel allocates millions of objects, so at Python's default (700, 10, 10)
# the collector ran hundreds of times a kernel and rescanned numba's long-lived state (a
# cold Transformer step's 20 jobs: 0.90 s of collection, 0.24 s with these). Off
# altogether it kept ~5 MB of cyclic garbage per job. Only in workers: the same thresholds
# in the program itself left its steady step slower.
GC_THRESHOLDS = (100_000, 20, 10)


def _tune_gc() -> None:
    """Freeze the objects numba's import and the warm-up left (never scanned again: they
    live as long as we do) and collect less often (`GC_THRESHOLDS`). No collection first:
    it took 0.04 s for ~2,000 dead objects."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ppid = envflags.integer("TRACEJIT_COMPILE_PARENT") or os.getppid()
    where = envflags.value("TRACEJIT_COMPILE_FINISH_DIR")
    handed = finish.finish_file(where, os.getpid()) if where else ""
    if os.getppid() != ppid and not (handed and finish.start_finishing(handed)):
        return   # the parent died while we started, leaving us nothing to do
    threading.Thread(target=_watch_parent, args=(ppid, handed), daemon=True).start()
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies goes to the parent's pipe
    fault = envflags.value("TRACEJIT_COMPILE_WORKER_FAULT")
    from . import diskcache
    if fault not in ("crash", "hang"):  # (those faults hit the first job: no need to wait)
        _warm_up()
    _tune_gc()
    # Ready: the parent sends our first job now, the best one queued by then (jobs submitted
    # during our start-up go by their rank, not by who came first).
    try:
        out.write(json.dumps({"ready": True}) + "\n")
        out.flush()
    except OSError:
        pass   # (the parent is gone: stdin's end tells us what to do)
    for line in sys.stdin:
        job = json.loads(line)
        if fault == "crash":
            os._exit(3)
        if fault == "hang":
            time.sleep(10 ** 6)
        opts = tuple(job.get("llvm_options", ()))
        if job.get("cache_dir"):
            os.environ["TRACEJIT_CACHE_DIR"] = job["cache_dir"]
            os.environ.pop("TRACEJIT_CACHE", None)
        t0 = time.perf_counter()
        try:
            if fault == "error":
                raise RuntimeError("injected compile error")
            before = diskcache.stats()["compiles"]
            diskcache.load_module(job["source"], name_hint=job["name_hint"], llvm_options=opts)
            compiled = diskcache.stats()["compiles"] - before
            if fault == "corrupt":
                _corrupt_entry(job["source"], opts)
            reply = {"id": job["id"], "ok": True, "seconds": time.perf_counter() - t0,
                     "compiled": compiled}
        except BaseException as exc:  # reported to the parent, which decides
            reply = {"id": job["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        try:
            out.write(json.dumps(reply) + "\n")
            out.flush()
        except OSError:   # the parent is gone (it handed its jobs over: finish.py)
            pass
    # stdin ended: the parent exited or shut the pool down; did it leave us its jobs?
    if handed and os.path.exists(handed):
        finish.run(handed)
    os._exit(0)   # (nothing to flush: our stdout is the parent's pipe, maybe gone)


if __name__ == "__main__":
    main()
