"""``tracejit.distributed``: processes that train together over MPI (like ``torch.distributed``).

Launch with ``mpiexec -n N python script.py`` (mpi4py + mpich: ``pip install 'tracejit[dist]'``)
(or ``python -m tracejit.distributed.run -n N script.py``, which restarts a failed job) and
call `init_process_group()`; a plain ``python script.py`` is a group of one. mpi4py is
imported by `init_process_group`, never by ``import tracejit``. No collective waits
forever: a peer that left, waits elsewhere or exceeds the timeout raises a `DistError`.
"""
from __future__ import annotations

from . import collectives, process_group
from .ulfm import is_ulfm_available, shrink
from .watchdog import (DistError, DistTimeoutError, PeerBlockedError, PeerExitedError,
                       ProcessFailedError)

__all__ = ["shrink", "is_ulfm_available", "DistError", "DistTimeoutError", "PeerExitedError",
           "PeerBlockedError", "ProcessFailedError"]
for _m in (collectives, process_group):   # their public names (__all__) are tracejit.distributed's
    globals().update((name, getattr(_m, name)) for name in _m.__all__)
    __all__ += _m.__all__
del _m
