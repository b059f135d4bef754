"""The steps about the machine: what GPU, driver and libraries it has, and the GPU tests.

``versions``: the GPU (nvidia-smi and cupy), driver and runtime, Python, numpy, numba,
numba-cuda, cupy, PyTorch and tracejit (with the git commit of the tree); fails only on a
GPU run that sees no GPU. ``gpu_tests``: ``python -m pytest -m gpu tests/cuda -x -q -n 0``,
counted from pytest's summary line; skipped when every test skipped (a dry run).
"""
from __future__ import annotations

import importlib.metadata as md
import platform
import re
import subprocess
import sys

from .record import REPO_ROOT, Record, gpu_reason, simulated

_SMI_FIELDS = "name,driver_version,memory.total,compute_cap,clocks.max.memory"


def _version(dist: str):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _run(cmd: list, timeout: float) -> tuple:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {e}"
    return r.returncode, (r.stdout + r.stderr).strip()


def versions(rec: Record) -> None:
    libs = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("numpy", "numba", "numba-cuda", "llvmlite", "cupy-cuda13x", "cupy-cuda12x",
                 "cuda-python", "cuda-bindings", "torch", "mpi4py", "tracejit"):
        libs[dist] = _version(dist)
    rc, commit = _run(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], 10)
    libs["tracejit_commit"] = commit if rc == 0 else None
    rec.detail("libraries", libs)

    rc, smi = _run(["nvidia-smi", f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader"], 20)
    gpus = [dict(zip(_SMI_FIELDS.split(","), (f.strip() for f in line.split(","))))
            for line in smi.splitlines()] if rc == 0 else []
    rec.detail("nvidia_smi", gpus if rc == 0 else f"unavailable: {smi}")
    if gpus:
        rec.figure("driver", gpus[0]["driver_version"])
        rec.figure("gpu", gpus[0]["name"])

    import tracejit as tj
    from numba import cuda
    rec.detail("numba_cuda_target", "simulator" if simulated() else "device")
    if not simulated():
        try:
            dev = cuda.get_current_device()
            rec.detail("numba_device", {"name": str(dev.name.decode() if isinstance(dev.name, bytes) else dev.name),
                                        "compute_capability": list(dev.compute_capability),
                                        "multiprocessors": dev.MULTIPROCESSOR_COUNT})
        except Exception as e:  # noqa: BLE001 - reported, the step decides below
            rec.detail("numba_device", f"{type(e).__name__}: {e}")
    why = gpu_reason()
    if why is None:
        from tracejit.device import cupy_module
        cp = cupy_module()
        rt = cp.cuda.runtime
        rec.detail("cupy", {"version": cp.__version__, "runtime": rt.runtimeGetVersion(),
                            "driver": rt.driverGetVersion(), "devices": rt.getDeviceCount()})
        rec.figure("gpu", tj.cuda.get_device_name())
    for k, v in rec.data["details"].items():
        print(f"  {k}: {v}", flush=True)
    if simulated():
        rec.finish("passed", "dry run: versions only, no GPU")
    elif why is not None:
        rec.finish("failed", f"no GPU for tracejit: {why}")
    else:
        rec.finish("passed")


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def gpu_tests(rec: Record) -> None:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/cuda", "-x", "-q", "-rfEs",
           "-p", "no:cacheprovider", "-n", "0"]   # one process: one GPU context
    rec.detail("command", " ".join(cmd[1:]))
    try:
        r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=max(rec.left() - 3, 5))
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:   # its output is bytes whatever `text` says
        out, rc = (e.stdout or b"").decode(errors="replace"), None
    print(out[-6000:], flush=True)
    tail = [line for line in out.strip().splitlines() if line.strip()]
    counts = {}
    for n, what in _COUNT.findall(tail[-1] if tail else ""):
        counts["errors" if what.startswith("error") else what] = int(n)
    for k in ("passed", "failed", "skipped", "errors"):
        rec.figure(k, counts.get(k, 0))
    failing = [line for line in tail if line.startswith(("FAILED", "ERROR"))]
    rec.detail("failures", failing)
    ran = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("errors", 0)
    all_pass = rc == 0 and ran > 0 and not failing
    if simulated():
        rec.target("every_gpu_test_passes", "all GPU-marked tests pass", None, None,
                   "not applicable: a dry run has no GPU")
    else:
        rec.target("every_gpu_test_passes", "all GPU-marked tests pass",
                   f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed", all_pass)
    if rc is None:
        rec.finish("failed", "pytest timed out")
    elif ran == 0 and counts.get("skipped", 0) and rc == 0:
        rec.finish("skipped" if simulated() else "failed",
                   "every GPU test skipped (no cupy or no GPU)")
    elif all_pass:
        rec.finish("passed")
    else:
        rec.finish("failed", failing[0] if failing else f"pytest exited with {rc}: {tail[-1] if tail else ''}")
