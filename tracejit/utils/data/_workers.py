"""Worker processes for ``DataLoader(num_workers > 0)``.

The parent keeps the sampler (so the order of indices, and therefore of batches, is
exactly that of ``num_workers=0``), hands batch ``k`` to worker ``k % num_workers``,
keeps at most ``prefetch_factor * num_workers`` batches in flight and yields results in
order. Workers load and collate; tensors travel back as numpy arrays (plus their dtype
and layout) and become Tensors again in the parent.

The start method (`start_context`): ``fork`` on Linux, as PyTorch, while forking is safe:
no thread runs but tracejit's own (which its fork hooks make fork-safe) and numba has not
started an OpenMP thread pool (GNU OpenMP does not re-initialize its pool after fork, so a
forked child can deadlock in its first parallel region). Otherwise ``spawn``: it costs an
interpreter start and imports per worker (``persistent_workers=True`` pays it once), needs
a picklable dataset and collate_fn, and runs the main script again in each worker, so a
script whose DataLoader loop is not under ``if __name__ == "__main__":`` is refused at once
with a message saying so (its workers would die starting). ``multiprocessing_context``
("fork", "spawn", "forkserver" or a context) is used as given.

Worker ``i`` seeds tracejit's, numpy's and Python's generators with ``base_seed + i``;
``base_seed`` is new at every ``iter(loader)``, derived from the loader's ``generator``
(else the global one) and its count of passes without drawing from it
(`DataLoader._base_seed`), so each epoch's workers draw fresh numbers and a fixed seed
makes them reproducible.
"""
from __future__ import annotations

import ast
import multiprocessing as mp
import multiprocessing.queues
import pickle
import queue
import sys
import threading
import time
import traceback
import weakref
from collections import namedtuple
from typing import Any

import numpy as np

__all__ = ["WorkerInfo", "get_worker_info", "WorkerPool", "LoadError", "start_context"]

WorkerInfo = namedtuple("WorkerInfo", ["id", "num_workers", "seed", "dataset"])
_worker_info: WorkerInfo | None = None
_POLL_S = 1.0   # how often a waiting parent checks that its workers are still alive


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker: (id, num_workers, seed, dataset copy); None in the main process."""
    return _worker_info


# ---------------------------------------------------------------- the wire format
class _WireTensor:
    """A tensor on its way back from a worker: its elements row-major in the order of its
    dims from the largest stride to the smallest (`order`, None when that is the dims'
    own order), so the parent rebuilds a tensor with the worker's layout (transposed,
    channels_last), as PyTorch's workers keep strides."""
    __slots__ = ("array", "order", "dtype", "requires_grad")

    def __init__(self, a: np.ndarray, dtype, requires_grad):
        order = None
        if not a.flags.c_contiguous:
            order = tuple(int(d) for d in np.argsort([-abs(st) for st in a.strides], kind="stable"))
            a = np.ascontiguousarray(a.transpose(order))
            if order == tuple(range(a.ndim)):
                order = None
        self.array, self.order, self.dtype, self.requires_grad = a, order, dtype, requires_grad

    def to_array(self) -> np.ndarray:
        return self.array if self.order is None else self.array.transpose(np.argsort(self.order))


def _rebuild(x, leaf):
    """`x` with `leaf` applied to everything in it that is no namedtuple, tuple, list or dict."""
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_rebuild(v, leaf) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_rebuild(v, leaf) for v in x)
    if isinstance(x, dict):
        return type(x)((k, _rebuild(v, leaf)) for k, v in x.items())
    return leaf(x)


def _to_wire(x):
    from ...tensor import Tensor
    return _rebuild(x, lambda t: _WireTensor(t.detach().cpu()._data, t.dtype.name, t.requires_grad)
                    if isinstance(t, Tensor) else t)


def _from_wire(x):
    from ... import dtypes as _dt
    from ...device import CPU
    from ...tensor import Tensor

    def leaf(w):
        if not isinstance(w, _WireTensor):
            return w
        t = Tensor._wrap(w.to_array(), _dt.as_dtype(w.dtype), CPU)
        return t.requires_grad_() if w.requires_grad else t
    return _rebuild(x, leaf)


class _KeyErrorText(str):
    """A KeyError's message shown as written: ``str(KeyError(m))`` is ``repr(m)``, which
    would print the worker's traceback as one line of escaped newlines."""

    def __repr__(self) -> str:
        return self


class LoadError:
    """A batch whose loading raised: what the loader's iterator raises in its place. The
    iterator stays usable after it, as PyTorch's, so a loop that catches a dataset's error
    goes on with the next batch."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def reraise(self):
        raise self.exc


class _WorkerError(LoadError):
    """An exception raised in a worker, carried to the parent as its type and text. The parent
    raises the same type, as PyTorch's, so ``except ValueError`` around the loop still catches a
    dataset's ValueError (RuntimeError where the type cannot travel or be built from a message)."""

    def __init__(self, worker_id: int, exc: BaseException):
        self.worker_id, self.type_name = worker_id, type(exc).__name__
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            pickle.dumps(type(exc))
            self.exc_type = type(exc)
        except Exception:   # (a class defined inside a function cannot travel)
            self.exc_type = None

    def reraise(self):
        msg = f"Caught {self.type_name} in DataLoader worker process {self.worker_id}.\nOriginal {self.text}"
        if self.exc_type is KeyError:
            msg = _KeyErrorText(msg)
        try:
            exc = self.exc_type(msg) if self.exc_type is not None else None
        except Exception:
            exc = None
        raise exc if isinstance(exc, BaseException) else RuntimeError(msg)


class _ResultQueue(multiprocessing.queues.Queue):
    """The workers' result queue. A result that does not pickle is answered with the error
    saying so: a plain Queue prints the error in its feeder thread and drops the result, and
    the parent waits for it for ever."""

    def _on_queue_feeder_error(self, e, obj):
        try:
            err = type(e)(f"the loaded batch could not be pickled to send it to the main process: {e}")
            err.__traceback__ = e.__traceback__
        except Exception:
            err = e
        self.put((obj[0], _WorkerError(-1 if _worker_info is None else _worker_info.id, err)))


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
    dataset = spec["dataset"]
    _seed_everything(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if spec["worker_init_fn"] is not None:
            spec["worker_init_fn"](worker_id)
    except Exception as e:  # reported on the first request, then the worker stops
        err = _WorkerError(worker_id, e)
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
            result = _WorkerError(worker_id, e)
        result_q.put((key, result))


# ---------------------------------------------------------------- the start method
def fork_hazard() -> str | None:
    """Why forking this process now is not safe (None when it is)."""
    if not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods():
        return "fork is not the safe start method on this platform"
    main = threading.main_thread()
    # (a finished pool's queues may still be flushing on multiprocessing's feeder threads,
    # one per queue: a forked worker never uses those queues, so they do not count -- else
    # every epoch after the first of a loop over a non-persistent loader would spawn)
    # (nor does a thread begun outside `threading` that once ran Python, a "Dummy-N": its
    # entry stays after it ends, so it would make every later loader spawn; PyTorch forks)
    others = [t.name for t in threading.enumerate()
              if t is not main and t.is_alive() and not isinstance(t, threading._DummyThread)
              and not t.name.startswith(("tracejit-", "QueueFeederThread"))]
    if others:
        return f"thread {others[0]!r} is running, which a forked worker would not have"
    par = sys.modules.get("numba.np.ufunc.parallel")
    if par is not None and getattr(par, "_is_initialized", False) and par.threading_layer() == "omp":
        return "numba's OpenMP thread pool is running, which a forked worker cannot use"
    return None


def start_context(requested: Any = None):
    """The multiprocessing context DataLoader workers start in (see the module docstring).
    A spawn or forkserver start from a main script that would run this loader again in
    every worker raises RuntimeError here, before any process starts."""
    if isinstance(requested, mp.context.BaseContext):
        ctx, why = requested, "as multiprocessing_context asks"
    elif requested:
        ctx, why = mp.get_context(requested), "as multiprocessing_context asks"
    else:
        why = fork_hazard()
        ctx = mp.get_context("spawn" if why else "fork")
    method = ctx.get_start_method()
    where = None if method == "fork" else _unguarded_main_line()
    if where:
        raise RuntimeError(
            f"DataLoader: worker processes start with {method!r} here ({why}), which runs the main "
            f"script again in each worker, and the DataLoader is used at {where}, outside an "
            f'`if __name__ == "__main__":` block: put the code that creates and iterates the '
            f"DataLoader under that guard, or use num_workers=0")
    return ctx


def _unguarded_main_line() -> str | None:
    """"file:line" of the main script's top-level statement running now, when it lies
    outside every ``if __name__ == "__main__":`` block (a spawned worker would run it
    again); None otherwise, or when it cannot be told (no script, source unreadable)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None or not path:
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= node.end_lineno:
            return None
    return f"{path}:{line}"


def _is_main_test(test) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
            and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))


def _unpicklable(exc: Exception, method: str, requested: Any) -> Exception:
    """The error for a worker that could not start because what it runs does not pickle:
    it says why this start method pickles and how to avoid it (same type as `exc` where it
    can be built from a message)."""
    why = "as multiprocessing_context asks" if requested else fork_hazard()
    msg = (f"DataLoader: worker processes start with {method!r} here ({why}), which pickles the "
           f"dataset, collate_fn and worker_init_fn to send them to each worker, and that failed: "
           f"{exc}. Define them, and the functions they hold, at module level (no lambdas, local "
           f"functions or open files), or, where forking is safe for the program, pass "
           f"multiprocessing_context='fork'")
    try:
        return type(exc)(msg)
    except Exception:
        return RuntimeError(msg)


# ---------------------------------------------------------------- the parent side
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
                 prefetch_factor: int = 2, timeout: float = 0):
        ctx = start_context(context)
        self.timeout = timeout   # seconds to wait for the next result (0: for ever), as PyTorch's
        self.num_workers, self.prefetch = num_workers, max(1, prefetch_factor) * num_workers
        self.result_q = _ResultQueue(ctx=ctx)
        self.index_queues = [ctx.Queue() for _ in range(num_workers)]
        self.workers = []
        for i in range(num_workers):
            w = ctx.Process(target=_worker_loop, args=(spec, i, num_workers, base_seed + i,
                                                       self.index_queues[i], self.result_q), daemon=True)
            try:
                w.start()
            except (pickle.PicklingError, AttributeError, TypeError) as e:
                _shutdown(self.workers, self.index_queues, self.result_q)
                if ctx.get_start_method() == "fork":
                    raise
                raise _unpicklable(e, ctx.get_start_method(), context) from e
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
        """Wait until the result for `key` has arrived (others are kept in `pending`); a
        RuntimeError once `timeout` seconds pass without any result arriving."""
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        while key not in pending:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            try:
                if wait <= 0:
                    raise queue.Empty
                k, v = self.result_q.get(timeout=wait)
            except queue.Empty:
                dead = [w for w in self.workers if not w.is_alive()]
                if dead:
                    pids = ", ".join(str(w.pid) for w in dead)
                    codes = ", ".join(str(w.exitcode) for w in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly with exit "
                                       f"code(s) {codes}") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds") from None
                continue
            if k[0] == self._epoch:   # results of an abandoned earlier epoch are dropped
                pending[k] = v
            if deadline is not None:
                deadline = time.monotonic() + self.timeout
        v = pending.pop(key)
        return v   # (a _WorkerError too: the loader's iterator raises it, and the epoch goes on)

    def run_indices(self, tasks):
        """Yield the loaded result of each item of `tasks` (batch index lists), in order. A run
        started meanwhile on this (persistent) pool ends this one, whose results the workers'
        answers to the later run replace: as PyTorch's persistent loader, whose one iterator
        every iter() resets, so an earlier iterator is exhausted (it would wait for ever)."""
        self._epoch += 1
        epoch, tasks = self._epoch, iter(tasks)
        pending: dict = {}
        sent = received = 0
        exhausted = False
        while True:
            if epoch != self._epoch:
                return   # a later run took the workers over (see above)
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
            yield out if isinstance(out, _WorkerError) else _from_wire(out)

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
            if epoch != self._epoch:
                return   # a later run took the workers over: see run_indices
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
            yield out if isinstance(out, _WorkerError) else _from_wire(out)

