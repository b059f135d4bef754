"""Parallel kernels called from several Python threads at once.

numba's ``workqueue`` threading layer (what numba uses where neither OpenMP nor TBB is
available, or with ``NUMBA_THREADING_LAYER=workqueue``) is not thread-safe: two threads
launching parallel kernels at the same time abort the whole process ("Concurrent access
has been detected"). OpenMP and TBB are safe. `guard_parallel` wraps a parallel kernel so
that, under workqueue only, launches go one at a time through a process-wide lock; with
the other layers the kernel is returned unchanged (no cost on the hot path).

Every parallel kernel also calls `coreshare.adapt` first (about 0.3-0.9 us): its thread
count, and BLAS's, follow the cores other processes leave free (a kernel split over a
core that another process holds waits a scheduler slice for it, and so does BLAS).
"""
from __future__ import annotations

import functools
import threading
from typing import Callable, Optional

from . import coreshare
from .coreshare import adapt

__all__ = ["workqueue_active", "guard_parallel"]

_LAUNCH_LOCK = threading.Lock()
_layer: Optional[str] = None


def threading_layer() -> str:
    """The threading layer numba uses for parallel kernels (starting its thread pool,
    which the first parallel kernel would do anyway)."""
    global _layer
    if _layer is None:
        from numba.np.ufunc import parallel
        parallel._launch_threads()
        _layer = parallel.threading_layer()
    return _layer


def workqueue_active() -> bool:
    return threading_layer() == "workqueue"


class _Adapted:
    """A parallel kernel that first sets the thread counts to the cores other processes
    leave us (`coreshare.adapt`); other attributes are the kernel's."""

    __slots__ = ("unguarded",)

    def __init__(self, fn: Callable):
        self.unguarded = fn

    def __call__(self, *args):
        adapt()
        return self.unguarded(*args)

    def __getattr__(self, name):
        return getattr(self.unguarded, name)


def guard_parallel(fn: Callable) -> Callable:
    """`fn` (a parallel numba kernel), made safe to call from several threads at once, and
    run on the threads the machine can give it now (see tracejit/compiler/cpu/runtime/coreshare.py)."""
    if not workqueue_active():
        return _Adapted(fn) if coreshare.ENABLED else fn

    @functools.wraps(fn)
    def serialized(*args):
        with _LAUNCH_LOCK:
            adapt()
            return fn(*args)
    serialized.unguarded = fn
    return serialized
