"""Timing and process plumbing shared by every system.

- ``measure``: the median of repeated timings after warm-up. A sample is a loop of
  ``number`` calls sized so that one sample lasts at least ``sample_s`` (timer noise
  stays small for microsecond calls); the result is seconds per call.
- ``step_times``: per-iteration times of a loop that must run in order (training steps).
- ``Watch``: what happened while a figure was timed (compiles and kernel loads the system
  reports, other processes' CPU): attached to the figure's timing, so a figure polluted
  by a compile, a load or another program is visible in the results.
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
    during: dict | None = None   # what `Watch` saw while the samples ran

    def value(self, stat: str) -> float:
        """The figure to report: "median" (the default) or "min" (best sample)."""
        return self.min_s if stat == "min" else self.median_s

    def as_dict(self) -> dict:
        d = {"median_s": self.median_s, "min_s": self.min_s, "samples": self.samples,
             "number": self.number}
        if self.warmup is not None:
            d["warmup"] = self.warmup
        if self.during is not None:
            d["during"] = self.during
        return d


def cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds every process on the machine has spent busy since boot, this process's
    own CPU seconds, its threads included), or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            head = f.readline().split()
        ticks = [int(x) for x in head[1:]]
    except (OSError, ValueError):
        return None
    # user nice system [idle iowait] irq softirq steal
    busy = sum(ticks[:3]) + sum(ticks[5:8])
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system


def thread_switches() -> tuple[int, int] | None:
    """(voluntary, involuntary) context switches of this process's threads so far, summed
    over its live threads (/proc/self/task/*/status: Linux), or None. A voluntary switch is
    a thread that blocked (a pool worker that went to sleep and had to be woken), an
    involuntary one a thread the scheduler took off its core."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    vol = invol = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue   # a thread that ended meanwhile
    return vol, invol


def process_cpu_s(pid: int) -> float | None:
    """A live process's CPU seconds (user + system, /proc/PID/stat: Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class Watch:
    """What happened while figures were timed: ``start()`` right before a timed loop,
    ``stop()`` right after it gives (and adds to the workload's running totals, which
    ``take()`` hands over and resets):

    - the system's own background work, as the counters its runner's ``activity()``
      reports (tracejit: kernel modules loaded or compiled in the process, its compile
      workers' CPU seconds): anything above zero means a compile or a load ran inside the
      timing, so the figure is not the steady step (a cold model's kernels compiling during its
      timed steps can triple them);
    - ``others_cores``: the cores other processes kept busy (a step whose threads split
      its work over both cores waits for one another process holds: on 2 cores such
      steps ran 4-8x slower), its compile workers not counted there, their CPU is above;
    - ``own_cores``: the cores this process's threads were given (its CPU seconds over the
      wall time, compile workers apart): a one-thread step's reading under 1 says it was
      preempted, so a slow figure with it low is the machine's load (at 0.5 a step's time
      is twice its CPU time), not a slower path the process ended on;
    - ``switches``: [voluntary, involuntary] context switches of this process's threads
      (`thread_switches`), in the timing's own reading only (not the workload's totals, not
      "work": a step whose work waits on a pool thread that went to sleep, or whose threads
      are preempted, shows here). Why: steps on two threads that keep both awake switch
      ~0 times a step, ones whose pool worker sleeps between launches ~6, and the second
      kind can read 1.5x slower on an otherwise quiet machine, so an outlier says which it
      was.
    """

    def __init__(self, counters: Callable[[], dict] | None = None):
        self.counters = counters or dict
        self.totals: dict = {}
        self._start = None

    def start(self) -> None:
        self._start = (self.counters(), cpu_seconds(), thread_switches(), time.perf_counter())

    def reading(self) -> dict:
        """What happened since `start`: the counters that grew, by how much,
        ``others_cores``, ``own_cores`` and ``switches``; not added to the totals (a
        settle's work is not a timing's)."""
        c0, r0, s0, t0 = self._start
        c1, r1, wall = self.counters(), cpu_seconds(), time.perf_counter() - t0
        s1 = thread_switches()
        seen = {k: c1[k] - c0.get(k, 0) for k in c1 if c1[k] - c0.get(k, 0) > 0}
        seen = {k: round(v, 2) if isinstance(v, float) else v for k, v in seen.items()}
        if r0 is not None and r1 is not None and wall > 0:
            others = ((r1[0] - r0[0]) - (r1[1] - r0[1]) - seen.get("worker_cpu_s", 0.0)) / wall
            seen["others_cores"] = round(max(0.0, others), 2)
            seen["own_cores"] = round(max(0.0, r1[1] - r0[1]) / wall, 2)
        if s0 is not None and s1 is not None:
            seen["switches"] = [max(0, s1[0] - s0[0]), max(0, s1[1] - s0[1])]
        return seen

    def stop(self) -> dict:
        """`reading`, added to the workload's totals (``others_cores`` as its maximum;
        ``own_cores`` and ``switches`` stay the timing's own)."""
        seen = self.reading()
        for k, v in seen.items():
            if k in ("switches", "own_cores"):
                continue
            if k == "others_cores":
                self.totals["others_cores_max"] = max(self.totals.get("others_cores_max", 0.0), v)
            else:
                self.totals[k] = self.totals.get(k, 0) + v
        return seen

    def take(self) -> dict:
        out, self.totals = self.totals, {}
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


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
            sample_s: float = 0.0, watch: Watch | None = None) -> Timing:
    """Median seconds per call of ``fn()`` over ``repeat`` samples after ``warmup`` calls
    (``watch``: what happened during the samples, in the timing's ``during``).

    ``fn`` must finish its work before returning (asynchronous systems block inside it).
    """
    for _ in range(warmup):
        fn()
    number = _calibrate(fn, sample_s) if sample_s > 0 else 1
    per_call = []
    if watch is not None:
        watch.start()
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        per_call.append((time.perf_counter() - t0) / number)
    during = watch.stop() if watch is not None else None
    return Timing(statistics.median(per_call), min(per_call), repeat, number, during=during)


def step_times(step: Callable[[], object], steps: int, warmup: int, warmup_s: float = 0.0,
               clock: Callable[[], float] = time.perf_counter, settle: Callable[[], object] | None = None,
               watch: Watch | None = None,
               timing_starts: Callable[[], object] | None = None) -> Timing:
    """Median time of one ``step()`` over ``steps`` consecutive steps after a warm-up of
    at least ``warmup`` steps and at least ``warmup_s`` seconds (``watch``: what happened
    during the timed steps, in the timing's ``during``).

    ``settle`` (the system's wait for its background compiles and loads) runs after the
    warm-up, and where ``watch`` saw it load or compile anything, the warm-up runs again
    before the timing (at most `SETTLE_ROUNDS` times): a step can ask for a kernel only in
    its warm-up (tracejit eager's Transformer: three of its hand-written kernels, first
    asked after the settle that follows the first step), and a kernel loaded in the
    settle has its first calls (and what they ask for) in the warm-up, not in the timing.

    Why seconds too: a training loop's thread counts follow tracejit's core-share policy
    (and any framework's own adaptive threading), which reads the machine's load at most
    every `tracejit.compiler.cpu.runtime.coreshare.INTERVAL` (0.25 s). The two-layer step's 500 steps last
    ~0.2 s, so with a warm-up counted in steps alone the whole timed run kept the count
    read over import and set-up, not the one a user's loop settles on (likely why two
    quiet runs gave 322 and 398 us median: two threads or one). A warm-up of two
    intervals or more has the policy sample over stepping alone before the timing
    starts. Every system gets the same warm-up. ``timing_starts()`` runs between the
    warm-up and the first timed step.
    """
    done = 0
    for rounds in range(SETTLE_ROUNDS if settle is not None else 1):
        t0 = clock()
        n = 0
        while n < warmup or clock() - t0 < warmup_s:
            step()
            n += 1
        done += n
        if settle is None:
            break
        if watch is not None:
            watch.start()
        settle()
        if watch is None or not _work(watch.reading()):
            break
        # what the settle loaded runs its first calls here, not in the timing
        warmup, warmup_s = max(warmup, REWARM_STEPS), max(warmup_s, REWARM_S)
    if timing_starts is not None:
        timing_starts()
    times = []
    if watch is not None:
        watch.start()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    during = watch.stop() if watch is not None else None
    return Timing(statistics.median(times), min(times), steps, 1, warmup=done, during=during)


# Warm-up rounds `step_times` runs at most while its settle keeps finding work, and a
# round after a settle that did lasts at least these steps and seconds (two of tracejit's
# thread-policy readings, coreshare.INTERVAL, over stepping alone: see above).
SETTLE_ROUNDS = 3
REWARM_STEPS = 3
REWARM_S = 0.5


def _work(seen: dict) -> bool:
    """Whether a `Watch` reading saw the system compile or load (not just other processes
    or its own threads' switches)."""
    return any(v for k, v in seen.items() if k not in ("others_cores", "own_cores", "switches"))


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes
def child_env(extra: dict | None = None) -> dict:
    # Children import tracejit from bytecode, as an installed package (bench/bytecode.py):
    # a first call's lazy imports otherwise compile from source in a shell that writes none.
    from . import bytecode
    bytecode.compile_once()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    # Progress lines must appear as they happen, not when the child exits.
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _run(args: list[str], *, env: dict, timeout_s: float, echo: bool,
         module: str = "bench.worker") -> tuple[dict | None, str | None, str]:
    """Run ``python -m MODULE ARGS --result FILE`` (``bench.worker`` unless named).

    Returns (result, error, stderr tail): the result is whatever the child last wrote
    (possibly partial), the error is None when the child exited cleanly.
    """
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", module, *args, "--result", str(result_file)]
        # A process group of its own: whatever it started and left running (compile workers)
        # is found and stopped when it ends, before the next system starts (`_leftovers`).
        # Not a session of its own: the scheduler's autogroup is per session, so a new one
        # would drop the priority the bench was started with (`echo -20 >
        # /proc/self/autogroup`, the near-quiet runs), and every system ran 4-7x slower.
        proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, bufsize=1, process_group=0)
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
        except BaseException:   # (Ctrl-C reaches only the foreground group: not the child's)
            proc.kill()
            _leftovers(proc.pid)
            raise
        left = _leftovers(proc.pid)
        reader.join(timeout=5)
        if error is None and proc.returncode != 0:
            last = next((ln for ln in reversed(tail) if ln.strip()), "no output")
            error = f"exit code {proc.returncode}: {last.strip()}"
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if error is None and result is None:
            error = "no result written"
        if result is not None and left:
            result["leftover_processes"] = left
        return result, error, "\n".join(tail)


def _leftovers(pgid: int) -> list[str]:
    """Kill what is still running in process group `pgid` (a finished child's): its command
    lines. A system's process may leave processes behind (tracejit's compile workers stop
    at its exit, within 0.5 s, unless it was killed or one started during its exit); they
    would take CPU from the next system's timed runs. Linux only (/proc); [] elsewhere."""
    import signal
    left = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return left
    killed = []
    for pid in pids:
        try:
            if _group_of_live(pid) != pgid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue
        killed.append(pid)
        left.append(cmdline[:200])
    deadline = time.monotonic() + 2.0   # gone (or a zombie) before the next system starts
    while killed and time.monotonic() < deadline:
        killed = [pid for pid in killed if _group_of_live(pid) is not None]
        if killed:
            time.sleep(0.01)
    return left


def _group_of_live(pid: int) -> int | None:
    """The process group of a live process (not a zombie), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


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
