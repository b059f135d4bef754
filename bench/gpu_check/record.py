"""One step's result file, the run's mode, and the clocks the steps time with.

A step writes ``<work>/steps/<name>.json`` through a `Record` after every figure, so a
step stopped by its timeout still leaves what it had measured. The record holds:

- ``status``: "passed", "failed" or "skipped" (None while it runs: a step killed by its
  timeout is closed as "failed" by the report);
- ``reason``: why it failed or was skipped;
- ``figures``: measured values (a name ending in ``_ms``, ``_us``, ``_gbs``... says its unit);
- ``targets``: ``name -> {"target", "value", "met"}``; ``met`` is None where the target
  does not apply (the simulator measures no GPU);
- ``details``: anything else worth reading (versions, failures, per-system results).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

STATUSES = ("passed", "failed", "skipped")
REPO_ROOT = Path(__file__).resolve().parents[2]


def simulated() -> bool:
    """True in a dry run: numba's CUDA target is the simulator (set before numba loads)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def gpu_reason() -> Optional[str]:
    """None when cupy sees a GPU, else why not (the reason a cupy step is skipped or fails)."""
    if simulated():
        return "dry run: numba's CUDA simulator has no device for cupy arrays"
    import tracejit as tj
    try:
        tj.zeros(1, device="cuda")
    except tj.cuda.CudaUnavailableError as e:
        return str(e)
    return None


def torch_cuda_reason() -> Optional[str]:
    """None when PyTorch sees a CUDA device, else why not."""
    if simulated():
        return "dry run: no GPU for PyTorch"
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - an optional peer
        return f"PyTorch is not importable ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    return None


class Record:
    """The result of step `name`, saved to `path` (atomically) on every change."""

    def __init__(self, name: str, path: Path, budget_s: float):
        self.name = name
        self.path = Path(path)
        self.started = time.monotonic()
        self.deadline = self.started + budget_s
        self.data: dict = {"name": name, "status": None, "reason": None, "mode":
                           "simulator" if simulated() else "gpu", "budget_s": budget_s,
                           "figures": {}, "targets": {}, "details": {}}
        self.save()

    def left(self) -> float:
        """Seconds left before the step's own deadline."""
        return self.deadline - time.monotonic()

    def figure(self, key: str, value: Any) -> None:
        self.data["figures"][key] = _round(value)
        self.save()

    def detail(self, key: str, value: Any) -> None:
        self.data["details"][key] = value
        self.save()

    def target(self, key: str, target: str, value, met: Optional[bool], note: str = "") -> None:
        """A target: its rule in words (">= 85% of copy"), the value, and whether it is met."""
        t = {"target": target, "value": _round(value), "met": met}
        if note:
            t["note"] = note
        self.data["targets"][key] = t
        self.save()

    def finish(self, status: str, reason: Optional[str] = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        self.data["status"] = status
        self.data["reason"] = reason
        self.data["seconds"] = round(time.monotonic() - self.started, 2)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def _round(v):
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    return v


class Clock:
    """Elapsed seconds of device work: cupy events on a GPU, the host clock under the simulator
    (whose kernels run on the host, synchronously)."""

    def __init__(self):
        self.cp = None
        if not simulated():
            from tracejit.device import cupy_module
            self.cp = cupy_module()

    def sync(self) -> None:
        if self.cp is not None:
            self.cp.cuda.get_current_stream().synchronize()

    def per_call(self, fn, reps: int, rounds: int = 5) -> float:
        """Median seconds per call of `fn` over `rounds` rounds of `reps` calls (after one call)."""
        fn()
        times = []
        for _ in range(rounds):
            if self.cp is not None:
                start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
                start.record()
                for _ in range(reps):
                    fn()
                end.record()
                end.synchronize()
                times.append(self.cp.cuda.get_elapsed_time(start, end) * 1e-3 / reps)
            else:
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                times.append((time.perf_counter() - t0) / reps)
        times.sort()
        return times[len(times) // 2]


def host_us_per_call(fn, reps: int, rounds: int, sync) -> float:
    """Median host microseconds per call of `fn` (launch cost: the device is not waited
    for inside a round; `sync` runs between rounds so queues do not fill)."""
    fn()
    sync()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps)
        sync()
    times.sort()
    return times[len(times) // 2] * 1e6
