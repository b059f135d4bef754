"""Kernels still compiling at exit (compiler/finish.py): a program that exits normally hands
its unfinished jobs to its workers, which compile them into the disk cache and exit, at
the latest at the cap (``TRACEJIT_COMPILE_FINISH``); the next process finds them there.

Each program runs in a fresh interpreter with a private kernel cache; each kernel source
is new to it (its own constant), so it really goes to a worker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 300   # generous: the machine may be shared


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _python(code: str, cache, **env) -> dict:
    full = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(cache), **env)
    for k in ("TRACEJIT_COMPILE_WORKER_FAULT", "TRACEJIT_COMPILE_FINISH", "TRACEJIT_COMPILE_WORKERS"):
        if k not in env:
            full.pop(k, None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


_KERNEL = """
from numba import njit

@njit("float64(float64[::1])", cache=CACHE)
def kernel(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * {c!r}
    return s
"""

_SUBMIT_AND_EXIT = """
    import json, time
    from tracejit.compiler import diskcache, finish, workers
    src = {src!r}
    job = workers.submit(src, "finish_test")
    marker = str(diskcache.cache_dir() / "marker")
    finish.when_cached(marker, [(src, ())])
    for _ in range(600):   # until the worker runs (it starts up, then takes the job)
        if workers.worker_pids() and not ({on_worker} and not any(
                j is job for j in workers._pool.current)):   # (and has it, where asked)
            break
        time.sleep(0.05)
    time.sleep({linger})
    print(json.dumps({{"pids": workers.worker_pids(), "done": job.done(), "src": src,
                      "marker": marker}}))
"""


def _program(c: float, linger: float, on_worker: bool = False) -> str:
    return _SUBMIT_AND_EXIT.format(src=_KERNEL.format(c=c), linger=linger, on_worker=on_worker)


def _wait_gone(pids, within: float) -> list:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_a_job_in_flight_at_exit_is_finished_into_the_cache(tmp_path):
    cache = tmp_path / "kernels"
    out = _python(_program(4.0625, 0.0), cache)
    assert out["pids"] and not out["done"]
    # the worker outlives the program, compiles the job, creates the marker, exits
    deadline = time.monotonic() + TIMEOUT_S
    while not os.path.exists(out["marker"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.path.exists(out["marker"])
    assert _wait_gone(out["pids"], 30) == []
    env = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(cache))
    code = ("import sys; from tracejit.compiler import diskcache; "
            "print(diskcache.is_cached(sys.stdin.read()))")
    r = subprocess.run([sys.executable, "-c", code], input=out["src"], env=env,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.stdout.strip() == "True", r.stderr
    assert not list((cache / "finish").glob("*.json"))   # the hand-over file is gone


def test_no_finishing_worker_outlives_the_cap(tmp_path):
    cache = tmp_path / "kernels"
    # One worker: a second one starts only when the program leaves a core idle, and it
    # would finish the hung job itself, so the outcome would follow the machine's load.
    # The job must be on the hung worker at exit: one still queued is handed to the worker's
    # finishing run, which compiles it (the fault hangs jobs taken from the pipe only).
    out = _python(_program(4.125, 0.5, on_worker=True), cache, TRACEJIT_COMPILE_WORKERS="1",
                  TRACEJIT_COMPILE_WORKER_FAULT="hang", TRACEJIT_COMPILE_FINISH="10")
    assert out["pids"] and not out["done"]
    # A worker left nothing exits within its watchdog's 0.5 s poll; this one finishes (it
    # hangs in the job), so it is still there 1.5 s later: the cap counts from the program's
    # exit hook, and leaves room for a slow interpreter teardown on a loaded machine ...
    time.sleep(1.5)
    assert all(_alive(p) for p in out["pids"])
    # ... until the cap ends it (+ slack for a busy machine)
    assert _wait_gone(out["pids"], 10 + 15) == []
    assert not os.path.exists(out["marker"])


def test_a_zero_cap_kills_the_workers_at_exit(tmp_path):
    cache = tmp_path / "kernels"
    out = _python(_program(4.1875, 0.0), cache,
                  TRACEJIT_COMPILE_FINISH="0")
    assert out["pids"]
    assert _wait_gone(out["pids"], 15) == []
    assert not (cache / "finish").exists() or not list((cache / "finish").glob("*.json"))
