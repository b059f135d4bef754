"""Launching worker scripts under ``mpiexec`` from pytest.

Workers (tests/distributed/workers/) assert and exit non-zero on failure; an uncaught
exception on one rank aborts the whole job (tracejit.distributed's fault handler), so a
failing check never leaves a rank waiting. Every launch has a timeout. Skipped with the
reason when mpi4py or mpiexec is missing (the ``dist`` extra installs both).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"

# MPICH over libfabric's TCP provider on the loopback interface, and no shared memory
# between local ranks: what ranks on different hosts would use, on one machine.
TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo",
           "MPIR_CVAR_NOLOCAL": "1"}


def find_mpiexec():
    """mpiexec next to this Python first (the mpich wheel's), then on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    return shutil.which("mpiexec")


def _skip_reason():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'tracejit[dist]')"
    if find_mpiexec() is None:
        return "no mpiexec next to sys.executable or on PATH (pip install mpich)"
    return None


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("NUMBA_NUM_THREADS", "1")  # ranks share the cores: no oversubscription
    env.update(extra or {})
    return env


class MpiRun:
    def __call__(self, worker: str, n: int, *args, env=None, timeout: float = 120.0, check: bool = True):
        """Run workers/<worker> on n ranks; return the CompletedProcess (stdout+stderr in .out)."""
        cmd = [find_mpiexec(), "-n", str(n), sys.executable, str(WORKERS / worker), *map(str, args)]
        try:
            p = subprocess.run(cmd, env=_env(env), cwd=str(ROOT), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            pytest.fail(f"{worker} on {n} ranks did not finish in {timeout} s:\n{out[-4000:]}")
        p.out = p.stdout
        if check and p.returncode != 0:
            pytest.fail(f"{worker} on {n} ranks exited with {p.returncode}:\n{p.out[-6000:]}")
        return p

    def launcher(self, worker: str, n: int, *args, restarts: int = 0, env=None, timeout: float = 120.0):
        """Run workers/<worker> through ``python -m tracejit.distributed.run``; never fails by itself."""
        cmd = [sys.executable, "-m", "tracejit.distributed.run", "-n", str(n), "--max-restarts", str(restarts),
               str(WORKERS / worker), *map(str, args)]
        p = subprocess.run(cmd, env=_env(env), cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        p.out = p.stdout
        return p

    def python(self, worker: str, *args, env=None, timeout: float = 120.0):
        """Run a worker as a plain ``python`` process (no mpiexec: world size 1)."""
        p = subprocess.run([sys.executable, str(WORKERS / worker), *map(str, args)], env=_env(env),
                           cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        p.out = p.stdout
        if p.returncode != 0:
            pytest.fail(f"{worker} (plain python) exited with {p.returncode}:\n{p.out[-6000:]}")
        return p


@pytest.fixture
def mpirun():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    return MpiRun()
