"""The process group: MPI's world communicator behind torch.distributed's functions.

``init_process_group()`` imports mpi4py only when called (``import tracejit`` never
touches MPI), duplicates ``COMM_WORLD`` so tracejit's messages never meet the user's own
mpi4py traffic, and installs a fault handler: an exception that escapes on one rank is
printed with the rank's number and then the whole job is aborted, so the other ranks
(blocked in a collective that will never complete) do not hang. Run without ``mpiexec``,
MPI reports one process and the group has world size 1.
"""
from __future__ import annotations

import sys
import traceback
from typing import Optional

__all__ = ["init_process_group", "is_initialized", "is_available", "get_rank", "get_world_size",
           "barrier", "destroy_process_group", "get_backend", "abort"]

_INSTALL_HINT = ("tracejit.distributed needs mpi4py and an MPI library: "
                 "pip install 'tracejit[dist]' (mpi4py + mpich, which brings mpiexec)")


class _Group:
    """The live group: the communicator and what collectives look up per call."""

    def __init__(self, MPI, comm):
        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()


_group: Optional[_Group] = None
_prev_excepthook = None


def is_available() -> bool:
    """True when mpi4py can be imported (the ``dist`` extra is installed)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return MPI


def init_process_group(backend: str = "mpi", init_method: Optional[str] = None, world_size: int = -1,
                       rank: int = -1, timeout=None, abort_on_exception: bool = True) -> None:
    """Join the process group MPI set up (``mpiexec -n N python script.py``).

    Rank and world size come from MPI; ``world_size``/``rank`` may be given only to check
    them. ``abort_on_exception`` installs the handler that aborts every rank when an
    exception escapes on one (as ``python -m mpi4py`` does).
    """
    global _group
    if backend not in ("mpi", None):
        raise ValueError(f"init_process_group: backend {backend!r} is not supported; tracejit "
                         f"runs on MPI only (backend='mpi')")
    if _group is not None:
        raise RuntimeError("init_process_group: the default process group is already initialized; "
                           "call destroy_process_group() first to start a new one")
    MPI = _mpi()
    comm = MPI.COMM_WORLD.Dup()
    g = _Group(MPI, comm)
    if world_size not in (-1, None) and world_size != g.size:
        comm.Free()
        raise ValueError(f"init_process_group: world_size={world_size} but MPI started {g.size} "
                         f"process(es); launch with mpiexec -n {world_size}")
    if rank not in (-1, None) and rank != g.rank:
        comm.Free()
        raise ValueError(f"init_process_group: rank={rank} but MPI gave this process rank {g.rank}")
    _group = g
    if abort_on_exception:
        _install_excepthook()


def _install_excepthook() -> None:
    global _prev_excepthook
    if _prev_excepthook is not None:
        return
    _prev_excepthook = sys.excepthook
    sys.excepthook = _abort_on_exception


def _abort_on_exception(exc_type, exc, tb) -> None:
    g = _group
    if g is None or g.size == 1 or issubclass(exc_type, KeyboardInterrupt):
        (_prev_excepthook or sys.__excepthook__)(exc_type, exc, tb)
        return
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    sys.stderr.write(f"[tracejit.distributed rank {g.rank}/{g.size}] uncaught exception:\n{text}"
                     f"[tracejit.distributed rank {g.rank}/{g.size}] {exc_type.__name__}: {exc} -- "
                     f"aborting all {g.size} ranks\n")
    sys.stderr.flush()
    sys.stdout.flush()
    g.MPI.COMM_WORLD.Abort(1)


def abort(errorcode: int = 1) -> None:
    """End every rank of the job now (MPI_Abort)."""
    _require("abort").MPI.COMM_WORLD.Abort(errorcode)


def _require(what: str, group=None) -> _Group:
    if group is not None and group is not _group:
        raise ValueError(f"{what}: only the default process group exists in tracejit.distributed "
                         f"(pass group=None), got {group!r}")
    if _group is None:
        raise RuntimeError(f"{what} needs the default process group: call "
                           f"tracejit.distributed.init_process_group() first (and launch the script "
                           f"with mpiexec -n N python script.py)")
    return _group


def is_initialized() -> bool:
    return _group is not None


def get_backend(group=None) -> str:
    _require("get_backend")
    return "mpi"


def get_rank(group=None) -> int:
    return _require("get_rank").rank


def get_world_size(group=None) -> int:
    return _require("get_world_size").size


def barrier(group=None, async_op: bool = False):
    g = _require("barrier", group)
    if async_op:
        from .collectives import Work
        return Work(g.comm.Ibarrier())
    g.comm.Barrier()
    return None


def destroy_process_group(group=None) -> None:
    """Leave the group (MPI itself is finalized at interpreter exit by mpi4py)."""
    global _group, _prev_excepthook
    g = _group
    if g is None:
        return
    _group = None
    if _prev_excepthook is not None and sys.excepthook is _abort_on_exception:
        sys.excepthook = _prev_excepthook
    _prev_excepthook = None
    g.comm.Free()
