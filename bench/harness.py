"""Timing and process plumbing shared by every system.

- ``measure``: the median of repeated timings after warm-up. A sample is a loop of
  ``number`` calls sized so that one sample lasts at least ``sample_s`` (timer noise
  stays small for microsecond calls); the result is seconds per call.
- ``step_times``: per-iteration times of a loop that must run in order (training steps).
- ``run_worker`` / ``run_child``: run code in a fresh interpreter (``python -m
  bench.worker``), stream its progress lines, and read its JSON result from a file.
  Each system runs in its own process so that one framework's threads, allocator and
  import side effects cannot disturb another's numbers; compile-latency probes get a
  process of their own so "first call" really is the first.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]


class Skip(Exception):
    """A workload that does not apply to, or is not yet available in, a system."""


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    samples: int
    number: int
    warmup: int | None = None    # warm-up calls run before the samples, where counted

    def value(self, stat: str) -> float:
        """The figure to report: "median" (the default) or "min" (best sample)."""
        return self.min_s if stat == "min" else self.median_s

    def as_dict(self) -> dict:
        d = {"median_s": self.median_s, "min_s": self.min_s, "samples": self.samples,
             "number": self.number}
        if self.warmup is not None:
            d["warmup"] = self.warmup
        return d


def _calibrate(fn: Callable[[], object], sample_s: float) -> int:
    """Calls per sample so that one sample lasts at least ``sample_s``."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= sample_s or number >= 1 << 20:
            return number
        # Aim a little past the target so we usually stop on the next round.
        number = max(number * 2, int(number * 1.2 * sample_s / max(dt, 1e-9)))


def measure(fn: Callable[[], object], *, warmup: int = 3, repeat: int = 15,
            sample_s: float = 0.0) -> Timing:
    """Median seconds per call of ``fn()`` over ``repeat`` samples after ``warmup`` calls.

    ``fn`` must finish its work before returning (asynchronous systems block inside it).
    """
    for _ in range(warmup):
        fn()
    number = _calibrate(fn, sample_s) if sample_s > 0 else 1
    per_call = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        per_call.append((time.perf_counter() - t0) / number)
    return Timing(statistics.median(per_call), min(per_call), repeat, number)


def step_times(step: Callable[[], object], steps: int, warmup: int, warmup_s: float = 0.0,
               clock: Callable[[], float] = time.perf_counter,
               timing_starts: Callable[[], object] | None = None) -> Timing:
    """Median time of one ``step()`` over ``steps`` consecutive steps after a warm-up of
    at least ``warmup`` steps and at least ``warmup_s`` seconds.

    Why seconds too: a training loop's thread counts follow tracejit's core-share policy
    (and any framework's own adaptive threading), which reads the machine's load at most
    every `tracejit.coreshare.INTERVAL` (0.25 s). The two-layer step's 500 steps last
    ~0.2 s, so with a warm-up counted in steps alone the whole timed run kept the count
    read over import and set-up, not the one a user's loop settles on (likely why two
    quiet runs gave 322 and 398 us median: two threads or one). A warm-up of two
    intervals or more has the policy sample over stepping alone before the timing
    starts. Every system gets the same warm-up. ``timing_starts()`` runs between the
    warm-up and the first timed step.
    """
    t0 = clock()
    done = 0
    while done < warmup or clock() - t0 < warmup_s:
        step()
        done += 1
    if timing_starts is not None:
        timing_starts()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return Timing(statistics.median(times), min(times), steps, 1, warmup=done)


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes
def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    # Progress lines must appear as they happen, not when the child exits.
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _run(args: list[str], *, env: dict, timeout_s: float,
         echo: bool) -> tuple[dict | None, str | None, str]:
    """Run ``python -m bench.worker ARGS --result FILE``.

    Returns (result, error, stderr tail): the result is whatever the child last wrote
    (possibly partial), the error is None when the child exited cleanly.
    """
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "bench.worker", *args, "--result", str(result_file)]
        proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, bufsize=1)
        tail: list[str] = []

        def pump() -> None:  # a thread, so a silent, hung child still meets the timeout
            for line in proc.stderr:  # type: ignore[union-attr]
                tail.append(line.rstrip("\n"))
                del tail[:-40]
                if echo and line.startswith("  ["):
                    print(line, end="", file=sys.stderr, flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        error = None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            error = f"timed out after {timeout_s:.0f} s"
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        if error is None and proc.returncode != 0:
            last = next((ln for ln in reversed(tail) if ln.strip()), "no output")
            error = f"exit code {proc.returncode}: {last.strip()}"
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if error is None and result is None:
            error = "no result written"
        return result, error, "\n".join(tail)


def run_worker(system: str, workloads: list[str], *, quick: bool, stat: str, env_extra: dict,
               timeout_s: float) -> tuple[dict | None, str | None, str]:
    """One process for one system, running the named workloads in order."""
    args = ["run", system, "--workloads", ",".join(workloads), "--stat", stat]
    args += ["--quick"] if quick else []
    return _run(args, env=child_env(env_extra), timeout_s=timeout_s, echo=True)


def run_child(system: str, probe: str, params: dict, *, env_extra: dict | None = None,
              timeout_s: float = 300.0) -> dict:
    """A fresh process running one probe (compile latency, dynamic shapes, the machine)."""
    args = ["probe", system, probe, "--params", json.dumps(params)]
    result, error, _ = _run(args, env=child_env(env_extra), timeout_s=timeout_s, echo=False)
    if error is not None or result is None:
        raise RuntimeError(f"{probe} probe failed: {error}")
    return result
