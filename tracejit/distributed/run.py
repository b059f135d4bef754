"""``python -m tracejit.distributed.run``: launch a training script on N ranks, restarting on failure.

    python -m tracejit.distributed.run -n 4 [--max-restarts 3] [--mpiexec-args "-f hosts"] train.py [args...]

torchrun's habits on top of ``mpiexec`` (the one next to this Python first, then PATH):
the job is started as ``mpiexec -n N python train.py args``; when it fails (a rank
exits non-zero or is killed: MPICH then ends the whole job) and restarts are left, it
is started again, with ``TRACEJIT_RESTART_COUNT`` (0, 1, ...) and
``TRACEJIT_MAX_RESTARTS`` in every rank's environment. The script resumes from its
last checkpoint (tracejit.distributed.checkpoint). The launcher's exit status is the
last attempt's. Each rank runs the script through a small bootstrap that records a
``sys.exit(code)`` so that the peers' error can say "called sys.exit(3)", and notes its
pid under ``TRACEJIT_RUN_DIR`` so that a failure MPICH reports by pid is named by rank.
"""
from __future__ import annotations

import argparse
import os
import re
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

__all__ = ["main"]

# hydra's report of a failed process: "PID 13676 RUNNING AT host" then "EXIT CODE: 9"
# (and, for a signal, "... EXIT STRING: Killed (signal 9)")
_BAD = re.compile(r"PID (\d+) RUNNING AT (\S+)")
_CODE = re.compile(r"EXIT CODE: (\d+)")
_STRING = re.compile(r"EXIT STRING: (.*\S)")


def find_mpiexec() -> Optional[str]:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def _bootstrap(script: str, args: List[str]) -> None:
    """Run `script` as __main__ in this rank, noting how it ends for the peers' messages."""
    from .. import envflags
    run_dir = envflags.value("TRACEJIT_RUN_DIR")
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    if run_dir and rank is not None:  # the launcher names a failed process by its rank
        Path(run_dir, f"{os.getpid()}.rank").write_text(rank)
    from . import process_group as pg
    sys.argv = [script] + args
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if pg._group is not None:
            pg._group.watch.exit_reason = f"called sys.exit({code!r})" if code not in (None, 0) else \
                "its script ended (sys.exit)"
        raise
    if pg._group is not None:
        pg._group.watch.exit_reason = "its script ended"


def _attempt(cmd: List[str], env: dict) -> tuple:
    """Run one attempt, passing its output through; return (exit status, failures hydra reported)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1,
                            text=True, errors="replace")
    failures, where = [], None
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = _BAD.search(line)
            if m:
                where = m.groups()
            elif where is not None and _CODE.search(line):
                failures.append([where, f"exit code {_CODE.search(line).group(1)}"])
                where = None
            elif failures and _STRING.search(line):
                failures[-1][1] += f", {_STRING.search(line).group(1)}"
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        raise
    return proc.wait(), failures


def _name(failures: list, run_dir: str) -> List[str]:
    named = []
    for (pid, host), how in failures:
        f = Path(run_dir, f"{pid}.rank")
        rank = f"rank {f.read_text().strip()}" if f.exists() else "a rank"
        named.append(f"{rank} (pid {pid} on {host}): {how}")
    return named


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-rank"]:  # inside mpiexec: this is one rank
        _bootstrap(argv[1], argv[2:])
        return 0
    ap = argparse.ArgumentParser(prog="python -m tracejit.distributed.run",
                                 description="Launch a script on N ranks under mpiexec; restart it when it fails.")
    ap.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    ap.add_argument("--max-restarts", type=int, default=0, help="restarts after a failed attempt (default 0)")
    ap.add_argument("--mpiexec", default=None, help="the mpiexec to use (default: next to this Python, then PATH)")
    ap.add_argument("--mpiexec-args", default="", help="extra mpiexec arguments, e.g. \"-f hosts -iface eth0\"")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc < 1:
        ap.error(f"-n must be >= 1, got {a.nproc}")
    if a.max_restarts < 0:
        ap.error(f"--max-restarts must be >= 0, got {a.max_restarts}")
    if not os.path.exists(a.script):
        ap.error(f"no such script: {a.script}")
    mpiexec = a.mpiexec or find_mpiexec()
    if mpiexec is None:
        ap.error("no mpiexec next to this Python or on PATH: pip install 'tracejit[dist]'")
    cmd = ([mpiexec, "-n", str(a.nproc)] + shlex.split(a.mpiexec_args) +
           [sys.executable, "-m", "tracejit.distributed.run", "--as-rank", a.script] + a.args)
    rc = 0
    for attempt in range(a.max_restarts + 1):
        with tempfile.TemporaryDirectory(prefix="tracejit-run-") as run_dir:
            env = dict(os.environ, TRACEJIT_RESTART_COUNT=str(attempt), TRACEJIT_MAX_RESTARTS=str(a.max_restarts),
                       TRACEJIT_RUN_DIR=run_dir)
            t0 = time.monotonic()
            rc, failures = _attempt(cmd, env)
            if rc == 0:
                return 0
            what = "; ".join(_name(failures, run_dir)) or f"mpiexec exited with {rc}"
        left = a.max_restarts - attempt
        sys.stderr.write(f"[tracejit.distributed.run] attempt {attempt + 1} failed after "
                         f"{time.monotonic() - t0:.1f} s ({what}); "
                         + (f"restarting ({left} restart{'s' if left != 1 else ''} left)\n" if left else
                            "no restarts left\n"))
        sys.stderr.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
