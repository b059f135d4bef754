"""``tracejit.multiprocessing``: Python's multiprocessing under PyTorch's module name, with
``spawn(fn, args, nprocs)`` (``torch.multiprocessing.spawn``: run ``fn(i, *args)`` in
`nprocs` processes and wait for them, raising if one fails). Tensors cross process
boundaries by pickling (their bytes), not by shared memory."""
from __future__ import annotations

import multiprocessing as _mp
from multiprocessing import *  # noqa: F401,F403

__all__ = list(getattr(_mp, "__all__", [])) + ["spawn", "start_processes", "ProcessRaisedException",
                                               "get_sharing_strategy", "set_sharing_strategy",
                                               "get_all_sharing_strategies"]


class ProcessRaisedException(Exception):
    """A process started by `spawn` exited with an error."""


def _run(fn, i, args):
    fn(i, *args)


def start_processes(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
                    start_method: str = "spawn"):
    ctx = _mp.get_context(start_method)
    procs = [ctx.Process(target=_run, args=(fn, i, tuple(args)), daemon=daemon) for i in range(nprocs)]
    for p in procs:
        p.start()
    if not join:
        return procs
    for p in procs:
        p.join()
    bad = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
    if bad:
        i, code = bad[0]
        raise ProcessRaisedException(f"process {i} terminated with exit code {code}")
    return None


def spawn(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str = "spawn"):
    return start_processes(fn, args, nprocs, join, daemon, start_method)


_STRATEGY = ["file_system"]


def get_sharing_strategy() -> str:
    return _STRATEGY[0]


def set_sharing_strategy(strategy: str) -> None:
    if strategy not in ("file_descriptor", "file_system"):
        raise ValueError(f"set_sharing_strategy: unknown strategy {strategy!r}")
    _STRATEGY[0] = strategy


def get_all_sharing_strategies() -> set:
    return {"file_descriptor", "file_system"}
