"""Worker processes for ``DataLoader(num_workers > 0)``.

The parent keeps the sampler (so the order of indices, and therefore of batches, is
exactly that of ``num_workers=0``), hands batch ``k`` to worker ``k % num_workers``,
keeps at most ``prefetch_factor * num_workers`` batches in flight and yields results in
order. Workers load and collate; tensors travel back as numpy arrays (plus their dtype)
and become Tensors again in the parent.

Processes start with ``spawn`` where it can run the program, not ``fork``: numba's
parallel threading layer (OpenMP / workqueue) and the BLAS thread pools are not fork-safe;
a child forked from a parent that already runs those threads can deadlock in its first
parallel region (GNU OpenMP does not re-initialize its pool after fork). ``spawn`` costs an
interpreter start and imports per worker (``persistent_workers=True`` pays it once), and
needs a picklable dataset and collate_fn -- and a script whose loading code sits under
``if __name__ == "__main__":``, since each spawned worker imports the main script again.
Many PyTorch programs have no such guard (PyTorch forks on Linux): for them spawn would
re-run the whole program in every worker, which fails, or hangs while the parent writes a
large dataset to a worker that already died. So when the loading starts from the main
script's top level outside such a guard, or the main module has no file (an interactive
session, ``python -c``), workers are forked instead (`default_start_method`).
``multiprocessing_context`` chooses explicitly. Every worker, forked or spawned, runs its
ops on one thread (``set_num_threads(1)``, as PyTorch's workers do), so a forked one never
enters a parallel region with the parent's thread pool.

Worker ``i`` seeds tracejit's, numpy's and Python's generators with ``base_seed + i``;
``base_seed`` is derived from tracejit's global generator state without drawing from it
(drawing would change the shuffle order against ``num_workers=0``), so
``tracejit.manual_seed`` makes worker randomness reproducible too.
"""
from __future__ import annotations

import ast
import hashlib
import multiprocessing as mp
import queue
import sys
import traceback
import weakref
from collections import namedtuple
from typing import Any

import numpy as np

__all__ = ["WorkerInfo", "get_worker_info", "WorkerPool"]

WorkerInfo = namedtuple("WorkerInfo", ["id", "num_workers", "seed", "dataset"])
_worker_info: WorkerInfo | None = None
_POLL_S = 1.0   # how often a waiting parent checks that its workers are still alive


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker: (id, num_workers, seed, dataset copy); None in the main process."""
    return _worker_info


# ---------------------------------------------------------------- the wire format
class _WireTensor:
    __slots__ = ("array", "dtype", "requires_grad")

    def __init__(self, array, dtype, requires_grad):
        self.array, self.dtype, self.requires_grad = array, dtype, requires_grad


def _to_wire(x):
    from ...tensor import Tensor
    if isinstance(x, Tensor):
        return _WireTensor(np.ascontiguousarray(x.detach().cpu()._data), x.dtype.name, x.requires_grad)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_to_wire(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_to_wire(v) for v in x)
    if isinstance(x, dict):
        return type(x)((k, _to_wire(v)) for k, v in x.items())
    return x


def _from_wire(x):
    if isinstance(x, _WireTensor):
        from ... import dtypes as _dt
        from ...device import CPU
        from ...tensor import Tensor
        t = Tensor._wrap(x.array, _dt.as_dtype(x.dtype), CPU)
        return t.requires_grad_() if x.requires_grad else t
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_from_wire(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_from_wire(v) for v in x)
    if isinstance(x, dict):
        return type(x)((k, _from_wire(v)) for k, v in x.items())
    return x


class _WorkerError:
    """An exception raised in a worker, carried to the parent as text."""

    def __init__(self, worker_id: int, exc: BaseException, where: str):
        self.worker_id, self.type_name, self.where = worker_id, type(exc).__name__, where
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self):
        raise RuntimeError(f"Caught {self.type_name} in DataLoader worker process {self.worker_id} "
                           f"{self.where}.\nOriginal traceback in the worker:\n{self.text}")


_EXHAUSTED = "exhausted"   # an IterableDataset worker's copy of the stream ended


# ---------------------------------------------------------------- the worker side
def _seed_everything(seed: int) -> None:
    import random
    from ...ops.random import manual_seed
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    manual_seed(seed)


def _worker_loop(spec: dict, worker_id: int, num_workers: int, seed: int, index_q, result_q) -> None:
    global _worker_info
    from ...threads import set_num_threads
    set_num_threads(1)
    dataset = spec["dataset"]
    _seed_everything(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if spec["worker_init_fn"] is not None:
            spec["worker_init_fn"](worker_id)
    except Exception as e:  # reported on the first request, then the worker stops
        err = _WorkerError(worker_id, e, "in worker_init_fn")
        while True:
            task = index_q.get()
            if task is None:
                return
            result_q.put((task[0], err))
    fetch = spec["fetch"]
    stream, stream_epoch = None, None
    while True:
        task = index_q.get()
        if task is None:
            return
        key, what = task
        try:
            if spec["iterable"]:
                epoch = key[0]
                if stream_epoch != epoch:
                    stream, stream_epoch = iter(dataset), epoch
                out = fetch(stream)
            else:
                out = fetch(what)
            result = _to_wire(out)
        except StopIteration:
            result = _EXHAUSTED
        except Exception as e:
            result = _WorkerError(worker_id, e, "while loading a batch")
        result_q.put((key, result))


# ---------------------------------------------------------------- the parent side
def default_start_method() -> str:
    """``"fork"`` where spawned workers could not run this program (see the top), else
    ``"spawn"``."""
    if "fork" not in mp.get_all_start_methods():
        return "spawn"
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path:
        return "fork"    # a worker could not import what the session defined
    line = _main_line(main)
    if line is None or _guarded(path, line):
        return "spawn"
    return "fork"


def _main_line(main) -> int | None:
    """The line of the main script's top-level code running now (the caller's caller...)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main.__dict__:
            return frame.f_lineno
        frame = frame.f_back
    return None


def _guarded(path: str, line: int) -> bool:
    """Whether `line` of the script at `path` lies in a top-level ``if __name__ == "__main__":``
    block (unreadable or unparsable source counts as guarded: spawn stays the choice)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return True
    for stmt in tree.body:
        if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            return isinstance(stmt, ast.If) and _is_main_test(stmt.test)
    return True


def _is_main_test(test) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def _shutdown(workers, index_queues, result_q) -> None:
    for q in index_queues:
        try:
            q.put(None)
        except (OSError, ValueError):
            pass
    for w in workers:
        w.join(timeout=5)
        if w.is_alive():
            w.terminate()
            w.join(timeout=5)
    for q in list(index_queues) + [result_q]:
        q.cancel_join_thread()
        q.close()


class WorkerPool:
    """``num_workers`` processes serving one DataLoader; `run` yields one epoch's batches."""

    def __init__(self, spec: dict, num_workers: int, base_seed: int, context: Any = None,
                 prefetch_factor: int = 2):
        if not isinstance(context, mp.context.BaseContext):
            context = mp.get_context(context or default_start_method())
        ctx = context
        self.num_workers, self.prefetch = num_workers, max(1, prefetch_factor) * num_workers
        self.result_q = ctx.Queue()
        self.index_queues = [ctx.Queue() for _ in range(num_workers)]
        self.workers = []
        for i in range(num_workers):
            w = ctx.Process(target=_worker_loop, args=(spec, i, num_workers, base_seed + i,
                                                       self.index_queues[i], self.result_q), daemon=True)
            w.start()
            self.workers.append(w)
        self._epoch = 0
        # Workers are stopped when the pool is closed or garbage-collected, and at exit.
        self._finalizer = weakref.finalize(self, _shutdown, self.workers, self.index_queues, self.result_q)

    def close(self) -> None:
        self._finalizer()

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def _get(self, pending: dict, key):
        """Wait until the result for `key` has arrived (others are kept in `pending`)."""
        while key not in pending:
            try:
                k, v = self.result_q.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [w for w in self.workers if not w.is_alive()]
                if dead:
                    pids = ", ".join(str(w.pid) for w in dead)
                    codes = ", ".join(str(w.exitcode) for w in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly with exit "
                                       f"code(s) {codes}") from None
                continue
            if k[0] == self._epoch:   # results of an abandoned earlier epoch are dropped
                pending[k] = v
        v = pending.pop(key)
        if isinstance(v, _WorkerError):
            v.reraise()
        return v

    def run_indices(self, tasks):
        """Yield the loaded result of each item of `tasks` (batch index lists), in order."""
        self._epoch += 1
        epoch, tasks = self._epoch, iter(tasks)
        pending: dict = {}
        sent = received = 0
        exhausted = False
        while True:
            while not exhausted and sent - received < self.prefetch:
                try:
                    t = next(tasks)
                except StopIteration:
                    exhausted = True
                    break
                self.index_queues[sent % self.num_workers].put(((epoch, sent), t))
                sent += 1
            if received == sent:
                return
            out = self._get(pending, (epoch, received))
            received += 1
            yield _from_wire(out)

    def run_stream(self):
        """Yield batches of an IterableDataset: worker copies in round-robin until all end."""
        self._epoch += 1
        epoch = self._epoch
        active = list(range(self.num_workers))
        pending: dict = {}
        in_flight: list = []   # (key, worker) in request order
        n = 0
        turn = 0
        while active or in_flight:
            while active and len(in_flight) < self.prefetch:
                w = active[turn % len(active)]
                turn += 1
                self.index_queues[w].put(((epoch, n), None))
                in_flight.append(((epoch, n), w))
                n += 1
            key, w = in_flight.pop(0)
            out = self._get(pending, key)
            if isinstance(out, str) and out == _EXHAUSTED:
                if w in active:
                    active.remove(w)
                # later requests already sent to w also come back exhausted
                continue
            yield _from_wire(out)


def base_seed() -> int:
    """A seed derived from (not drawn from) tracejit's global generator state."""
    from ...ops.random import get_rng_state
    digest = hashlib.sha256(repr(get_rng_state()).encode()).digest()
    return int.from_bytes(digest[:7], "little")
