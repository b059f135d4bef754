"""`Channel`: one communicator of the group whose every collective is numbered and watched.

All of tracejit.distributed's traffic goes through channels (the group's own, one per
DistributedDataParallel, one for the join context): each operation starts MPI's
non-blocking form and waits in `Watchdog.wait`, so no rank ever blocks inside MPI where
a departed or mismatched peer would leave it forever. Python objects travel pickled,
their sizes first, through the same non-blocking collectives.
"""
from __future__ import annotations

import pickle
from typing import Any, List

import numpy as np

from .watchdog import Op, Watchdog

__all__ = ["Channel"]


class Channel:
    """A tracked communicator: ``start_*`` return (request, Op); the plain forms also wait."""

    def __init__(self, MPI, comm, watch: Watchdog):
        self.MPI = MPI
        self.comm = comm
        self.watch = watch
        self.id = watch.channel()
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()

    def begin(self, what: str, hint: str = "") -> Op:
        return self.watch.begin(self.id, what, hint)

    def wait(self, requests: list, ops) -> None:
        self.watch.wait([r for r in requests if r is not None], ops)

    def start(self, fn, op: Op):
        """``fn()`` starts MPI's operation; an MPI error there (a revoked communicator) is reported as in a wait."""
        try:
            return fn()
        except self.MPI.Exception as exc:
            self.watch._mpi_failed(exc, (op,))

    def run(self, start, what: str, hint: str = ""):
        """Number an operation, start it with ``start()`` (a request), wait for it."""
        op = self.begin(what, hint)
        self.watch.wait([self.start(start, op)], (op,))

    # ---------------------------------------------------------------- arrays (in place)
    def start_allreduce(self, buf: np.ndarray, op, what: str, hint: str = ""):
        o = self.begin(what, hint)
        return self.start(lambda: self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=op), o), o

    def allreduce(self, buf: np.ndarray, op, what: str, hint: str = "") -> np.ndarray:
        req, o = self.start_allreduce(buf, op, what, hint)
        self.watch.wait([req], (o,))
        return buf

    def bcast(self, buf: np.ndarray, root: int, what: str) -> np.ndarray:
        self.run(lambda: self.comm.Ibcast(buf, root=root), what)
        return buf

    def barrier(self, what: str = "barrier") -> None:
        self.run(lambda: self.comm.Ibarrier(), what)

    # ---------------------------------------------------------------- Python objects
    def allgather_obj(self, obj: Any, what: str) -> List[Any]:
        data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        sizes = np.zeros(self.size, np.int64)
        mine = np.array([data.size], np.int64)
        self.run(lambda: self.comm.Iallgather(mine, sizes), what)
        recv = np.empty(int(sizes.sum()), np.uint8)
        displs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        counts = [int(s) for s in sizes]
        self.run(lambda: self.comm.Iallgatherv(data, [recv, counts, [int(d) for d in displs], self.MPI.BYTE]),
                 what)
        return [pickle.loads(recv[d:d + c].tobytes()) for d, c in zip(displs, counts)]

    def bcast_obj(self, obj: Any, root: int, what: str) -> Any:
        if self.rank == root:
            data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8).copy()
            n = np.array([data.size], np.int64)
        else:
            data, n = None, np.zeros(1, np.int64)
        self.run(lambda: self.comm.Ibcast(n, root=root), what)
        if data is None:
            data = np.empty(int(n[0]), np.uint8)
        self.run(lambda: self.comm.Ibcast(data, root=root), what)
        return obj if self.rank == root else pickle.loads(data.tobytes())

    def dup(self, what: str) -> "Channel":
        """A new channel on a duplicate of this communicator (collective: every rank calls it)."""
        op = self.begin(what)
        comm, req = self.start(lambda: self.comm.Idup(), op)
        self.watch.wait([req], (op,))
        return Channel(self.MPI, comm, self.watch)

    def free(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None:
            try:
                comm.Free()
            except Exception:  # a revoked or failed communicator: nothing left to release
                pass

