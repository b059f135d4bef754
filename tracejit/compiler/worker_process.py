"""One compile worker process and the thread reading its replies (workers.py's pool
starts, feeds and stops them)."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

__all__: list = []   # (workers.py's)


class _Worker:
    """One worker process plus the thread reading its replies."""

    def __init__(self):
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])   # (the directory above tracejit/)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
        env["TRACEJIT_COMPILE_PARENT"] = str(os.getpid())
        # where a hand-over at our exit would leave its jobs (finish.py)
        from . import cacheroot, finish
        self.finish_dir = finish.finish_dir(cacheroot.root())
        env["TRACEJIT_COMPILE_FINISH_DIR"] = self.finish_dir or ""
        # A worker runs no parallel kernels: one numba thread, no OpenMP pool to spin
        # (whatever count the program's own numba was given).
        env["NUMBA_NUM_THREADS"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracejit.compiler.compile_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self.replies: queue.Queue = queue.Queue()
        self.ready = threading.Event()   # its start-up is done (or it exited)
        self.used = False  # has been given a job (a worker started ahead may never be)
        self._starting = True   # counted busy (`compiling`) until its start-up is done
        _w._busy(1)
        threading.Thread(target=self._read, daemon=True, name="tracejit-compile-reader").start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stdout:
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if isinstance(reply, dict) and reply.get("ready"):
                    self._started()
                else:
                    self.replies.put(reply)
        self._started()
        self.replies.put(None)  # EOF: the worker exited

    def _started(self) -> None:
        """Its start-up is done (or it exited): no longer `compiling` for it."""
        if self._starting:
            self._starting = False
            _w._busy(-1)
        self.ready.set()

    def send(self, job: "_w.Job") -> None:
        # The cache root of the moment of sending: a worker started earlier may have
        # another one in its environment (the parent's TRACEJIT_CACHE_DIR changed since).
        from . import diskcache
        root = diskcache.cache_dir()
        msg = {"id": job.id, "source": job.source, "name_hint": job.name_hint,
               "llvm_options": list(job.llvm_options), "cache_dir": str(root) if root else None}
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def kill(self) -> None:
        # Kill first: closing stdout while the reader thread is blocked in a read of it
        # would wait for that read (the buffer's lock), which only the worker's death ends.
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=5)   # reap: no zombie
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                f.close()

    def close(self, grace: float = 1.0) -> None:
        """Ask the worker to stop (stdin EOF), kill it if it does not within `grace` s."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        self.kill()


# (at the end: workers.py imports this module at its start, either may be imported first)
from . import workers as _w  # noqa: E402
