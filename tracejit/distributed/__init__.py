"""``tracejit.distributed``: processes that train together over MPI (like ``torch.distributed``).

Launch with ``mpiexec -n N python script.py`` (mpi4py + mpich: ``pip install 'tracejit[dist]'``)
(or ``python -m tracejit.distributed.run -n N script.py``, which restarts a failed job) and
call `init_process_group()`; a plain ``python script.py`` is a group of one. mpi4py is
imported by `init_process_group`, never by ``import tracejit``. No collective waits
forever: a peer that left, waits elsewhere or exceeds the timeout raises a `DistError`.
"""
from __future__ import annotations

from .collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor, all_gather_object,
                          all_reduce, broadcast, broadcast_object_list, gather, reduce, reduce_scatter,
                          reduce_scatter_tensor, scatter)
from .process_group import (GroupMember, abort, barrier, default_pg_timeout, destroy_process_group,
                            get_backend, get_rank, get_world_size, group, init_process_group, is_available,
                            is_initialized)
from .ulfm import is_ulfm_available, shrink
from .watchdog import (DistError, DistTimeoutError, PeerBlockedError, PeerExitedError,
                       ProcessFailedError)

__all__ = ["init_process_group", "is_initialized", "is_available", "get_rank", "get_world_size",
           "get_backend", "barrier", "destroy_process_group", "abort", "ReduceOp", "Work", "all_reduce",
           "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
           "reduce", "gather", "scatter", "broadcast_object_list", "all_gather_object", "default_pg_timeout",
           "shrink", "is_ulfm_available", "DistError", "DistTimeoutError", "PeerExitedError", "PeerBlockedError",
           "ProcessFailedError", "group", "GroupMember"]
