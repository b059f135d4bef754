"""A compile worker process: ``python -m tracejit.compiler.compile_worker``.

The parent (`workers.CompilePool`) writes one JSON job per line on our stdin (a module's
source, name hint and LLVM options); we compile it through the disk cache and answer one
JSON line: ``{"id", "ok", "seconds", "compiled"}`` or ``{"id", "ok": false, "error"}``,
after a first ``{"ready": true}`` once start-up is done. The parent then loads the entry
from disk instead of compiling under numba's global lock.

We never outlive the parent except for a capped hand-over (finish.py): stdin closing ends
the loop, and a watchdog exits when we are re-parented. SIGINT is ignored (the parent
decides when we stop). ``TRACEJIT_COMPILE_WORKER_FAULT`` (tests only) injects ``crash``,
``hang``, ``error`` or ``corrupt``.
"""
from __future__ import annotations

import contextlib
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
    """Pay numba's one-off costs (import, target and typing tables) before the first job: a
    first tiny kernel took 1.9 s, the next 0.19 s."""
    with contextlib.suppress(Exception):   # a real job reports whatever is wrong
        import numba
        import numpy as np

        @numba.njit("void(float32[::1], float32[::1])", nogil=True, cache=False)
        def _k(a, out):  # pragma: no cover - compiled, never called
            for i in range(a.shape[0]):
                out[i] = a[i] * np.float32(2.0) + np.float32(1.0)


# The garbage collector's thresholds while we compile: numba allocates millions of objects
# per kernel, and at Python's defaults the collector rescanned its state hundreds of times
# (a Transformer step's 20 jobs: 0.90 s of collection, 0.24 s with these).
GC_THRESHOLDS = (100_000, 20, 10)


def _tune_gc() -> None:
    """Freeze the objects numba's import and warm-up left and collect less often
    (`GC_THRESHOLDS`)."""
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
    with contextlib.suppress(OSError):   # (the parent is gone: stdin's end tells us what to do)
        out.write(json.dumps({"ready": True}) + "\n")
        out.flush()
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
        with contextlib.suppress(OSError):   # the parent is gone (it handed its jobs over)
            out.write(json.dumps(reply) + "\n")
            out.flush()
    # stdin ended: the parent exited or shut the pool down; did it leave us its jobs?
    if handed and os.path.exists(handed):
        finish.run(handed)
    os._exit(0)   # (nothing to flush: our stdout is the parent's pipe, maybe gone)


if __name__ == "__main__":
    main()
