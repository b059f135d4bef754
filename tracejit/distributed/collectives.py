"""Collectives on tensors, in place, as torch.distributed names them, over MPI.

Each call works on the tensor's numpy array directly (like c10d, outside autograd) and
bumps the tensor's version counter. Every call starts MPI's non-blocking form and waits
in the group's watchdog (a departed or mismatched peer raises instead of hanging; see
watchdog.py); ``async_op=True`` returns a `Work` instead of waiting, and the arrays
involved stay referenced by the Work until ``wait()``.

Agreement check: before moving data, every public collective compares a short signature
of its arguments (operation, shapes, dtype, root) across ranks with one 24-byte
all-reduce (tens of microseconds at most, against 0.5 ms for a 4 MB all-reduce).
Without it, tensors of different sizes either make MPI fail with a message about
truncation or, worse, make the ranks wait for each other forever. When the signatures
differ, every rank raises the same `RuntimeError` listing what each rank passed.
Arguments that are wrong on one rank only (a bad ``tensor_list``) are reported the
same way, so no rank is left waiting. DistributedDataParallel's own bucket reductions
skip the check: it verified the parameter shapes once, at construction.
"""
from __future__ import annotations

import zlib
from enum import Enum
from typing import Callable, List, Optional

import numpy as np

from ..tensor import Tensor
from .process_group import _Group, _require

__all__ = ["ReduceOp", "Work", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
           "reduce_scatter", "reduce_scatter_tensor", "reduce", "gather", "scatter",
           "broadcast_object_list", "all_gather_object"]


class ReduceOp(Enum):
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


def _mpi_op(MPI, op: ReduceOp):
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
            ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND,
            ReduceOp.BOR: MPI.BOR, ReduceOp.BXOR: MPI.BXOR}[op]


class Work:
    """A started collective: ``wait()`` blocks until it is done and the tensors hold the result."""

    def __init__(self, requests=None, finish: Optional[Callable[[], None]] = None, keep=(), ops=(),
                 result=None):
        self._requests = [r for r in (requests if isinstance(requests, (list, tuple)) else [requests])
                          if r is not None]
        self._finish = finish
        self._keep = keep  # the arrays MPI reads/writes: alive until completion
        self._ops = ops
        self._result = result
        self._done = False

    def _complete(self) -> None:
        self._done = True
        self._requests = []
        self._keep = ()
        if self._finish is not None:
            fin, self._finish = self._finish, None
            fin()

    def wait(self, timeout=None) -> bool:
        """Wait (watched: a departed peer or the group's timeout raises a DistError)."""
        if not self._done:
            if self._requests:
                from .process_group import _group
                if _group is None:
                    raise RuntimeError("Work.wait: the process group was destroyed before the "
                                       "operation completed")
                _group.watch.wait(self._requests, self._ops)
            self._complete()
        return True

    def is_completed(self) -> bool:
        if not self._done:
            from mpi4py import MPI
            if not self._requests or MPI.Request.Testall(self._requests):
                self._complete()
        return self._done

    def result(self):
        """Wait; then the operation's result array where it has one (else None)."""
        self.wait()
        return self._result


# ---------------------------------------------------------------- argument checks
def _check_tensor(t, what: str, name: str = "tensor") -> np.ndarray:
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: {name} must be a tracejit Tensor, got {type(t).__name__}")
    if not isinstance(t._data, np.ndarray):
        raise TypeError(f"{what}: {name} is on {t.device}; tracejit.distributed moves CPU tensors "
                        f"only (copy it with .cpu() first)")
    return t._data


def _describe(t: Tensor) -> str:
    return f"shape {tuple(t.shape)} {t.dtype.name}"


def _agree(g: _Group, what: str, sig: str, local_err: Optional[str] = None) -> None:
    """Every rank raises the same error unless all ranks passed the same signature."""
    if g.size == 1:
        if local_err:
            raise ValueError(f"{what}: {local_err}")
        return
    h = zlib.crc32(sig.encode()) + 1
    flags = np.array([h, -h, 1 if local_err else 0], dtype=np.int64)
    g.world.allreduce(flags, g.MPI.MAX, f"{what} (argument check)")
    if flags[0] == h and flags[1] == -h and flags[2] == 0:
        return
    everyone = g.world.allgather_obj((sig, local_err), f"{what} (argument check)")
    errs = [f"rank {r}: {e}" for r, (_, e) in enumerate(everyone) if e]
    if errs:
        raise ValueError(f"{what}: bad arguments on some rank, so no rank moved data: " + "; ".join(errs))
    groups: dict = {}
    for r, (s, _) in enumerate(everyone):
        groups.setdefault(s, []).append(r)
    parts = [f"rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))}: {s}" for s, rs in groups.items()]
    raise RuntimeError(f"{what}: the ranks passed tensors that do not match (every rank must pass "
                       f"the same shape and dtype): " + "; ".join(parts))


def _check_rank(g: _Group, r, name: str) -> Optional[str]:
    if not isinstance(r, (int, np.integer)) or not 0 <= r < g.size:
        return f"{name}={r!r} is not a rank of this group of {g.size}"
    return None


# ---------------------------------------------------------------- staging
_NATIVE = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                  np.uint8, np.uint16, np.uint32, np.uint64)}


def _stage(arr: np.ndarray, reduce: bool):
    """A buffer MPI can use for `arr`: itself when possible, else a contiguous copy.

    float16 (no MPI reduction type) is reduced in float32 and moved as raw 16-bit words;
    bool is reduced as uint8.
    """
    dt = arr.dtype
    if dt in _NATIVE and arr.flags.c_contiguous and arr.flags.writeable:
        return arr, False
    if dt == np.float16:
        return (np.ascontiguousarray(arr, np.float32) if reduce
                else np.ascontiguousarray(arr).view(np.uint16)), True
    if dt == np.bool_:
        return np.ascontiguousarray(arr, np.uint8), True
    return np.ascontiguousarray(arr), True


def _store(t: Tensor, buf: np.ndarray) -> None:
    arr = t._data
    if buf is not arr:
        if arr.dtype == np.float16 and buf.dtype == np.uint16:
            buf = buf.view(np.float16)
        if arr.flags.writeable:
            arr[...] = buf.reshape(arr.shape).astype(arr.dtype, copy=False)
        else:
            t._data = buf.reshape(arr.shape).astype(arr.dtype)
    t._vbox[0] += 1


def _run(g: _Group, what: str, async_op: bool, start, finish) -> Optional[Work]:
    """Number the operation, start it (``start()`` gives MPI's request); wait and finish
    now, or when the Work is waited on."""
    op = g.world.begin(what)
    req = g.world.start(start, op)
    if not async_op:
        g.watch.wait([req], (op,))
        finish()
        return None
    return Work(req, finish, keep=(start,), ops=(op,))


# ---------------------------------------------------------------- collectives
def all_reduce(tensor: Tensor, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce `tensor` across ranks; every rank ends with the result, in place."""
    what = "all_reduce"
    g = _require(what, group)
    arr = _check_tensor(tensor, what)
    op = ReduceOp(op) if not isinstance(op, ReduceOp) else op
    err = None
    if op is ReduceOp.AVG and not tensor.dtype.is_floating_point:
        err = f"ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype.name}"
    _agree(g, what, f"{_describe(tensor)}, op {op.name}", err)
    buf, _ = _stage(arr, reduce=True)
    mop = _mpi_op(g.MPI, op)

    def start():
        return g.comm.Iallreduce(g.MPI.IN_PLACE, buf, op=mop)

    def finish():
        if op is ReduceOp.AVG:
            buf[...] /= g.size
        _store(tensor, buf)
    return _run(g, what, async_op, start, finish)


def broadcast(tensor: Tensor, src: int = 0, group=None, async_op: bool = False):
    """Copy rank `src`'s tensor into `tensor` on every rank."""
    what = "broadcast"
    g = _require(what, group)
    arr = _check_tensor(tensor, what)
    _agree(g, what, f"{_describe(tensor)}, src {src}", _check_rank(g, src, "src"))
    buf, _ = _stage(arr, reduce=False)

    def start():
        return g.comm.Ibcast(buf, root=src)
    return _run(g, what, async_op, start, lambda: _store(tensor, buf))


def _gather_buffer(g: _Group, tensor: Tensor):
    send, _ = _stage(tensor._data, reduce=False)
    recv = np.empty((g.size,) + send.shape, send.dtype)
    return send, recv


def all_gather(tensor_list: List[Tensor], tensor: Tensor, group=None, async_op: bool = False):
    """``tensor_list[r]`` receives rank r's `tensor`, on every rank."""
    what = "all_gather"
    g = _require(what, group)
    _check_tensor(tensor, what)
    err = _list_error(g, tensor_list, tensor, "tensor_list")
    _agree(g, what, _describe(tensor), err)
    send, recv = _gather_buffer(g, tensor)

    def start():
        return g.comm.Iallgather(send, recv)

    def finish():
        for t, r in zip(tensor_list, recv):
            _store(t, r)
    return _run(g, what, async_op, start, finish)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group=None, async_op: bool = False):
    """`output_tensor` (world_size * input's first dim, or [world_size, *input.shape]) gets every rank's input."""
    what = "all_gather_into_tensor"
    g = _require(what, group)
    _check_tensor(output_tensor, what, "output_tensor")
    _check_tensor(input_tensor, what, "input_tensor")
    err = None
    if output_tensor.numel() != g.size * input_tensor.numel() or output_tensor.dtype is not input_tensor.dtype:
        err = (f"output_tensor ({_describe(output_tensor)}) must hold {g.size} x input_tensor "
               f"({_describe(input_tensor)})")
    _agree(g, what, _describe(input_tensor), err)
    send, recv = _gather_buffer(g, input_tensor)

    def start():
        return g.comm.Iallgather(send, recv)
    return _run(g, what, async_op, start, lambda: _store(output_tensor, recv))


def _list_error(g: _Group, lst, like: Tensor, name: str) -> Optional[str]:
    if lst is None or len(lst) != g.size:
        return f"{name} must be a list of {g.size} tensors (one per rank), got {_len(lst)}"
    for i, t in enumerate(lst):
        if not isinstance(t, Tensor) or tuple(t.shape) != tuple(like.shape) or t.dtype is not like.dtype:
            got = _describe(t) if isinstance(t, Tensor) else type(t).__name__
            return f"{name}[{i}] is {got}, expected {_describe(like)}"
    return None


def _len(lst) -> str:
    return "None" if lst is None else f"{len(lst)}"


def reduce_scatter(output: Tensor, input_list: List[Tensor], op: ReduceOp = ReduceOp.SUM,
                   group=None, async_op: bool = False):
    """Reduce ``input_list[r]`` over all ranks into `output` on rank r."""
    what = "reduce_scatter"
    g = _require(what, group)
    _check_tensor(output, what, "output")
    op = ReduceOp(op) if not isinstance(op, ReduceOp) else op
    err = _list_error(g, input_list, output, "input_list")
    _agree(g, what, f"{_describe(output)}, op {op.name}", err)
    send = np.stack([_stage(t._data, reduce=True)[0] for t in input_list])
    return _reduce_scatter(g, what, op, send, output, async_op)


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: ReduceOp = ReduceOp.SUM,
                          group=None, async_op: bool = False):
    """Like `reduce_scatter` with the inputs concatenated along the first dimension."""
    what = "reduce_scatter_tensor"
    g = _require(what, group)
    _check_tensor(output, what, "output")
    _check_tensor(input, what, "input")
    op = ReduceOp(op) if not isinstance(op, ReduceOp) else op
    err = None
    if input.numel() != g.size * output.numel() or input.dtype is not output.dtype:
        err = f"input ({_describe(input)}) must hold {g.size} x output ({_describe(output)})"
    _agree(g, what, f"{_describe(output)}, op {op.name}", err)
    send = _stage(input._data, reduce=True)[0].reshape(g.size, -1)
    return _reduce_scatter(g, what, op, send, output, async_op)


def _reduce_scatter(g: _Group, what: str, op: ReduceOp, send: np.ndarray, output: Tensor, async_op: bool):
    recv = np.empty(send.shape[1:], send.dtype)
    mop = _mpi_op(g.MPI, op)

    def start():
        return g.comm.Ireduce_scatter_block(send, recv, op=mop)

    def finish():
        if op is ReduceOp.AVG:
            recv[...] /= g.size
        _store(output, recv)
    return _run(g, what, async_op, start, finish)


def reduce(tensor: Tensor, dst: int = 0, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce into `tensor` on rank `dst` only (other ranks' tensors are left as they were)."""
    what = "reduce"
    g = _require(what, group)
    arr = _check_tensor(tensor, what)
    op = ReduceOp(op) if not isinstance(op, ReduceOp) else op
    _agree(g, what, f"{_describe(tensor)}, dst {dst}, op {op.name}", _check_rank(g, dst, "dst"))
    buf, _ = _stage(arr, reduce=True)
    mop = _mpi_op(g.MPI, op)
    root = g.rank == dst

    def start():
        sendbuf = g.MPI.IN_PLACE if root else buf
        recvbuf = buf if root else None
        return g.comm.Ireduce(sendbuf, recvbuf, op=mop, root=dst)

    def finish():
        if root:
            if op is ReduceOp.AVG:
                buf[...] /= g.size
            _store(tensor, buf)
    return _run(g, what, async_op, start, finish)


def gather(tensor: Tensor, gather_list: Optional[List[Tensor]] = None, dst: int = 0,
           group=None, async_op: bool = False):
    """``gather_list[r]`` on rank `dst` receives rank r's `tensor`; other ranks pass no list."""
    what = "gather"
    g = _require(what, group)
    _check_tensor(tensor, what)
    err = _check_rank(g, dst, "dst")
    if err is None and g.rank == dst:
        err = _list_error(g, gather_list, tensor, "gather_list")
    _agree(g, what, f"{_describe(tensor)}, dst {dst}", err)
    send, recv = _gather_buffer(g, tensor)
    recv = recv if g.rank == dst else None

    def start():
        return g.comm.Igather(send, recv, root=dst)

    def finish():
        if recv is not None:
            for t, r in zip(gather_list, recv):
                _store(t, r)
    return _run(g, what, async_op, start, finish)


def scatter(tensor: Tensor, scatter_list: Optional[List[Tensor]] = None, src: int = 0,
            group=None, async_op: bool = False):
    """Rank r's `tensor` receives ``scatter_list[r]`` of rank `src`; other ranks pass no list."""
    what = "scatter"
    g = _require(what, group)
    arr = _check_tensor(tensor, what)
    err = _check_rank(g, src, "src")
    if err is None and g.rank == src:
        err = _list_error(g, scatter_list, tensor, "scatter_list")
    _agree(g, what, f"{_describe(tensor)}, src {src}", err)
    recv, _ = _stage(arr, reduce=False)
    send = np.stack([_stage(t._data, reduce=False)[0] for t in scatter_list]) if g.rank == src else None

    def start():
        return g.comm.Iscatter(send, recv, root=src)
    return _run(g, what, async_op, start, lambda: _store(tensor, recv))


# ---------------------------------------------------------------- Python objects (pickled)
def broadcast_object_list(object_list: list, src: int = 0, group=None) -> None:
    """Replace `object_list`'s items with rank `src`'s (pickled; for small objects)."""
    g = _require("broadcast_object_list", group)
    object_list[:] = g.world.bcast_obj(list(object_list) if g.rank == src else None, src,
                                       "broadcast_object_list")


def all_gather_object(object_list: list, obj, group=None) -> None:
    """``object_list[r]`` becomes rank r's `obj` (pickled; for small objects)."""
    g = _require("all_gather_object", group)
    got = g.world.allgather_obj(obj, "all_gather_object")
    if len(object_list) != g.size:
        raise ValueError(f"all_gather_object: object_list must have {g.size} entries, got {len(object_list)}")
    object_list[:] = got
