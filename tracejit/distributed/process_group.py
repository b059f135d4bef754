"""The process group: MPI's world communicator behind torch.distributed's functions.

``init_process_group()`` imports mpi4py only when called (``import tracejit`` never
touches MPI), duplicates ``COMM_WORLD`` so tracejit's messages never meet the user's own
mpi4py traffic, and sets up the group's `Watchdog` (every wait watches its peers and
the group's timeout; see watchdog.py). It installs a fault handler: an exception that
escapes on one rank is printed with the rank's number and then the whole job is
aborted, so the other ranks do not wait for it. Leaving (the end of the script,
``sys.exit``, `destroy_process_group`) tells the peers, so a rank still waiting for this
one raises instead of hanging. Run without ``mpiexec``, MPI reports one process and the
group has world size 1.
"""
from __future__ import annotations

import atexit
import datetime
import os
import sys
import time
import traceback
import weakref
from typing import Optional, Union

from .channel import Channel
from .watchdog import DistError, Watchdog

__all__ = ["init_process_group", "is_initialized", "is_available", "get_rank", "get_world_size",
           "barrier", "destroy_process_group", "get_backend", "abort", "default_pg_timeout", "group",
           "GroupMember"]

# How long one collective may wait before it raises DistTimeoutError. Departed and
# mismatched peers are detected within a second without it: the timeout only ends waits
# for a peer that is alive but stuck, or gone without a word (a lost host).
default_pg_timeout = datetime.timedelta(minutes=10)

_INSTALL_HINT = ("tracejit.distributed needs mpi4py and an MPI library: "
                 "pip install 'tracejit[dist]' (mpi4py + mpich, which brings mpiexec)")


class _Group:
    """The live group: the communicator, its watchdog, and what collectives look up per call."""

    def __init__(self, MPI, comm, timeout: float, fault_tolerant: bool = False):
        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = timeout
        self.fault_tolerant = fault_tolerant
        self.watch = Watchdog(MPI, comm, timeout)
        self.world = Channel(MPI, comm, self.watch)
        self.generation = 0       # bumped by shrink(): users of the old world rebuild
        self.users = weakref.WeakSet()  # DDP and join contexts holding channels of their own

    def new_channel(self, what: str) -> Channel:
        """A private communicator for one user (DDP, a join context), created on every rank."""
        return self.world.dup(what)


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


def _seconds(timeout) -> float:
    if timeout is None:
        return default_pg_timeout.total_seconds()
    if isinstance(timeout, datetime.timedelta):
        secs = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        secs = float(timeout)
    else:
        raise TypeError(f"init_process_group: timeout must be a datetime.timedelta or a number of "
                        f"seconds, got {type(timeout).__name__}")
    if not secs > 0:
        raise ValueError(f"init_process_group: timeout must be positive, got {timeout!r}")
    return secs


def init_process_group(backend: str = "mpi", init_method: Optional[str] = None, world_size: int = -1,
                       rank: int = -1, timeout: Union[datetime.timedelta, float, None] = None,
                       abort_on_exception: bool = True, fault_tolerant: bool = False) -> None:
    """Join the process group MPI set up (``mpiexec -n N python script.py``).

    Rank and world size come from MPI; ``world_size``/``rank`` may be given only to check
    them. ``timeout`` (a timedelta or seconds; default `default_pg_timeout`) bounds every
    wait in a collective. ``abort_on_exception`` installs the handler that aborts every
    rank when an exception escapes on one (as ``python -m mpi4py`` does).
    ``fault_tolerant=True`` asks for an MPI with ULFM (Open MPI started with
    ``mpiexec --with-ft ulfm``): a dead peer then raises `ProcessFailedError` on the
    survivors, who can `shrink` the group and go on; it raises here when the MPI has none.
    """
    global _group
    if backend not in ("mpi", None):
        raise ValueError(f"init_process_group: backend {backend!r} is not supported; tracejit "
                         f"runs on MPI only (backend='mpi')")
    if _group is not None:
        raise RuntimeError("init_process_group: the default process group is already initialized; "
                           "call destroy_process_group() first to start a new one")
    secs = _seconds(timeout)
    MPI = _mpi()
    if fault_tolerant:
        from . import ulfm
        why = ulfm.unavailable_reason(MPI)
        if why:
            raise RuntimeError(f"init_process_group(fault_tolerant=True): {why}")
    world = MPI.COMM_WORLD
    size, me = world.Get_size(), world.Get_rank()
    err = None
    if world_size not in (-1, None) and world_size != size:
        err = (f"init_process_group: world_size={world_size} but MPI started {size} process(es); "
               f"launch with mpiexec -n {world_size}")
    elif rank not in (-1, None) and rank != me:
        err = f"init_process_group: rank={rank} but MPI gave this process rank {me}"
    if size > 1:  # every rank raises, or none: a rank left behind would wait in the next collective
        errs = [e for e in world.allgather(err) if e]
        if errs and not err:
            err = f"{errs[0]} (on another rank)"
    if err:
        raise ValueError(err)
    comm = MPI.COMM_WORLD.Dup()
    if fault_tolerant:
        comm.Set_errhandler(MPI.ERRORS_RETURN)
    _group = _Group(MPI, comm, secs, fault_tolerant)
    _register_exit()
    if abort_on_exception:
        _install_excepthook()


_exit_registered = False
_ABORT_SETTLE = 2.0  # at most this long between telling the peers and MPI_Abort


def _register_exit() -> None:
    global _exit_registered
    if not _exit_registered:
        atexit.register(_leave_at_exit)
        _exit_registered = True


def _leave(g: _Group, why: str) -> Optional[str]:
    if g.watch.broken is not None:
        return g.watch.broken
    try:
        return g.watch.leave(why)
    except DistError as exc:
        return str(exc)


def _leave_at_exit() -> None:
    """At interpreter exit: tell the peers, wait for them to leave too, or end the job."""
    global _group
    g = _group
    if g is None or g.size == 1:
        return
    why = g.watch.exit_reason or "its script ended or called sys.exit()"
    err = _leave(g, why)
    if err is not None:
        sys.stderr.write(f"[tracejit.distributed rank {g.rank}/{g.size}] {err} -- aborting all "
                         f"{g.size} ranks\n")
        sys.stderr.flush()
        sys.stdout.flush()
        _announce_and_settle(g, err)
        _abort_now(g)
    _group = None


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
    _announce_and_settle(g, f"{exc_type.__name__}: {exc}")
    _abort_now(g)


def _announce_and_settle(g: _Group, msg: str) -> None:
    """Tell the peers why this rank ends the job, then give them a moment to say their own
    piece (each answers with its own note once it has printed) before MPI_Abort kills them."""
    try:
        g.watch.announce_abort(msg)
        t0 = time.monotonic()
        while time.monotonic() - t0 < _ABORT_SETTLE:
            g.watch.poll()
            if all(p.abort is not None for p in g.watch.peers.values()):
                time.sleep(0.3)  # and for mpiexec to pass their last lines on before it kills them
                break
            time.sleep(0.005)
    except Exception:  # a failed transport: abort at once
        pass


def _abort_now(g: _Group, code: int = 1) -> None:
    """MPI_Abort, then leave at once: MPICH's MPI_Abort returns (the launcher kills the
    job a moment later), and this process must not go on into its exit handlers."""
    if g.fault_tolerant:
        from . import ulfm
        ulfm.revoke_all(g)
    sys.stdout.flush()
    sys.stderr.flush()
    g.MPI.COMM_WORLD.Abort(code)
    os._exit(code)


def abort(errorcode: int = 1) -> None:
    """End every rank of the job now (MPI_Abort)."""
    _abort_now(_require("abort"), errorcode)


class GroupMember:
    """``dist.group.WORLD`` / ``dist.GroupMember.WORLD``: the default group, which is the only
    group here; passing it is the same as passing ``group=None``."""
    WORLD = object()
    NON_GROUP_MEMBER = object()


group = GroupMember


def _require(what: str, group=None) -> _Group:
    if group is not None and group is not _group and group is not GroupMember.WORLD:
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
    _require("get_backend", group)
    return "mpi"


def get_rank(group=None) -> int:
    return _require("get_rank", group).rank


def get_world_size(group=None) -> int:
    return _require("get_world_size", group).size


def barrier(group=None, async_op: bool = False):
    g = _require("barrier", group)
    if async_op:
        from .collectives import Work
        op = g.world.begin("barrier")
        return Work(g.comm.Ibarrier(), ops=(op,))
    g.world.barrier()
    return None


def destroy_process_group(group=None) -> None:
    """Leave the group: tell the peers and wait until every rank has left it (MPI itself is
    finalized at interpreter exit by mpi4py). A peer still waiting in a collective for this
    rank raises `PeerExitedError` instead."""
    global _group, _prev_excepthook
    g = _group
    if g is None:
        return
    err = _leave(g, "called destroy_process_group()") if g.size > 1 else None
    _group = None
    if _prev_excepthook is not None and sys.excepthook is _abort_on_exception:
        sys.excepthook = _prev_excepthook
    _prev_excepthook = None
    if err is not None:
        raise DistError(f"destroy_process_group: {err}")
    for u in list(g.users):
        u._release_channels()
    g.watch.ctl.Free()
    g.comm.Free()
