"""Going on with the survivors after a rank dies (ULFM: MPI's user-level failure mitigation).

Needs an MPI with ULFM: Open MPI 5 started with ``mpiexec --with-ft ulfm`` (the ``ulfm``
extra installs the Open MPI wheel, in an environment of its own: its ``mpiexec`` and the
MPICH wheel's would overwrite each other). MPICH's ch4 device has none, and there a dead
rank ends the whole job as before. With ``init_process_group(fault_tolerant=True)``:

* a collective that involves a dead rank raises `ProcessFailedError` (naming it) on the
  survivor that sees it, which first *revokes* every communicator of the group, so that
  every other survivor's pending or next collective raises too instead of waiting;
* every survivor calls `shrink()`: the group becomes the survivors (ranks renumbered in
  order), each DistributedDataParallel follows on its next forward (a new communicator,
  the interrupted step's reduction dropped, the replicas re-broadcast from the new rank
  0), and the training loop rebuilds its sampler for the new world size and repeats
  the interrupted step from the in-memory replica.
"""
from __future__ import annotations

import os
from typing import List, Optional

__all__ = ["shrink", "unavailable_reason", "is_ulfm_available"]


def is_ulfm_available() -> bool:
    """True when this process can use ``init_process_group(fault_tolerant=True)``: Open MPI
    with ULFM, started by ``mpiexec --with-ft ulfm``. Imports mpi4py, which starts MPI."""
    try:
        from mpi4py import MPI
    except ImportError:
        return False
    return unavailable_reason(MPI) is None


def unavailable_reason(MPI) -> Optional[str]:
    """Why this MPI cannot go on after a failure (None when it can)."""
    lib = MPI.Get_library_version().splitlines()[0].strip()
    if "Open MPI" not in lib:
        return (f"the MPI here ({lib}) has no usable ULFM; install tracejit[ulfm] (the Open MPI wheel) "
                f"in an environment of its own and launch with mpiexec --with-ft ulfm")
    if not hasattr(MPI.Comm, "Shrink"):
        return "this mpi4py has no Comm.Shrink/Revoke (mpi4py >= 4 is needed)"
    if os.environ.get("OMPI_MCA_mpi_ft_enable", "").lower() not in ("1", "true", "yes"):
        return "Open MPI's fault tolerance is off: launch with mpiexec --with-ft ulfm"
    return None


def _channels(g) -> list:
    chans = [g.world]
    if getattr(g, "join_channel", None) is not None:
        chans.append(g.join_channel)
    for u in list(g.users):
        c = u.__dict__.get("_chan")
        if c is not None:
            chans.append(c)
    return chans


def revoke_all(g) -> None:
    """Revoke every communicator of the group: every survivor's collective on it fails at once."""
    for c in _channels(g) + [None]:
        comm = g.watch.ctl if c is None else c.comm
        if comm is None:
            continue
        try:
            if not comm.Is_revoked():
                comm.Revoke()
        except Exception:  # already freed or failed: nothing to stop
            pass


def on_failure() -> List[int]:
    """Called where a collective reported a process failure: revoke, and name the dead ranks."""
    from . import process_group as pg
    g = pg._group
    if g is None or not g.fault_tolerant:
        return []
    revoke_all(g)
    try:
        failed = g.comm.Get_failed()
        ranks = g.MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), g.comm.Get_group())
        failed.Free()
        return sorted(int(r) for r in ranks if r >= 0)
    except Exception:  # the MPI cannot name them: the message says so
        return []


def shrink() -> None:
    """Go on with the survivors: every surviving rank calls this after a `ProcessFailedError`.

    The default group becomes the survivors (ranks renumbered in their old order); every
    DistributedDataParallel follows on its next forward. A rank's new number is
    ``get_rank()`` and the new size ``get_world_size()`` afterwards.
    """
    from . import process_group as pg
    from .channel import Channel
    from .watchdog import Watchdog
    g = pg._require("shrink")
    if not g.fault_tolerant:
        raise RuntimeError("shrink: the group was not started with init_process_group(fault_tolerant=True) "
                           "(which needs an MPI with ULFM)")
    revoke_all(g)
    new = g.comm.Shrink()
    new.Set_errhandler(g.MPI.ERRORS_RETURN)
    old_ctl, old_comm = g.watch.ctl, g.comm
    for c in _channels(g):
        if c is not g.world:
            c.free()
    g.join_channel = None
    g.comm = new
    g.rank, g.size = new.Get_rank(), new.Get_size()
    progress = g.watch.progress
    g.watch = Watchdog(g.MPI, new, g.timeout)
    g.watch.progress = progress
    g.world = Channel(g.MPI, new, g.watch)
    g.generation += 1
    for comm in (old_ctl, old_comm):
        try:
            comm.Free()
        except Exception:
            pass
