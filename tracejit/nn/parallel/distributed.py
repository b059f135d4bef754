"""`DistributedDataParallel`: every rank trains a replica on its shard; gradients are averaged.

How a step runs (PyTorch's design, on MPI):

* Construction checks that every rank built the same model (names, shapes, dtypes of
  parameters and buffers; the first difference is named) and copies rank 0's values to
  all ranks, so replicas start equal.
* Parameters that require grad are laid out in reverse registration order (roughly the
  order the backward produces their gradients) into buckets of at most
  ``bucket_cap_mb``. Each bucket owns a persistent flat numpy buffer: a non-blocking
  all-reduce must write into memory that stays alive and unmoved until it completes, and
  MPICH crashed when given a temporary receive buffer, so DDP never hands MPI anything
  else (``Iallreduce`` with ``MPI.IN_PLACE`` on the bucket).
* A post-accumulate-grad hook on every parameter copies its ``.grad`` into its bucket
  slot. When a bucket is full it is launched, always in bucket order (MPI requires every
  rank to start collectives in the same order), while the backward goes on producing
  the other gradients. The hook of the last gradient waits for all buckets, divides by
  the world size and writes the averages back into each ``.grad``.
* ``no_sync()``: forwards inside it do not reduce; gradients accumulate locally and the
  first synchronized backward reduces the sum.
* Every wait is watched (tracejit/distributed/watchdog.py): a rank that left or waits in
  another collective makes the others raise, naming the bucket and step they wait in.
* ``join()``: uneven inputs (`Join` semantics, see ddp_join.py): ranks that ran out of
  batches shadow the others' reductions with zeros until all are done.

The wrapped module may be compiled (``DDP(tj.script(model))``): its backward reaches each
parameter through the same accumulate step, so the same hooks fire.
"""
from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

import numpy as np

from ...autograd import grad_mode as _gm
from ...autograd.graph import reachable_leaves
from ...distributed.algorithms.join import Join, Joinable, JoinHook
from ...func.transforms import _flatten
from ...tensor import Tensor
from ..module import Module
from .ddp_join import DDPJoinHook

__all__ = ["DistributedDataParallel"]

UNEVEN_HINT = ("every rank must run the same number of steps: give each the same number of batches "
               "(DistributedSampler pads the shards; drop_last=True drops a short last batch) or "
               "wrap the loop in `with model.join():` for uneven inputs")

_NEEDS_INIT = ("DistributedDataParallel needs the default process group: call "
               "tracejit.distributed.init_process_group() before wrapping the model (and launch "
               "the script with mpiexec -n N python script.py)")


class _Bucket:
    """A run of parameters whose gradients are reduced together, and the buffer they share."""

    def __init__(self, index: int, dtype: np.dtype):
        self.index = index
        self.dtype = dtype
        self.params: List[int] = []   # positions in DDP's parameter order
        self.offsets: List[int] = []
        self.numel = 0
        self.buf: Optional[np.ndarray] = None
        self.pending = 0
        self.request = None
        self.op = None

    def add(self, pos: int, numel: int) -> None:
        self.params.append(pos)
        self.offsets.append(self.numel)
        self.numel += numel

    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def _bucket_dtype(p: Tensor) -> np.dtype:
    dt = np.dtype(p.dtype.np)
    return np.dtype(np.float32) if dt == np.float16 else dt  # MPI has no float16 sum


class DistributedDataParallel(Module, Joinable):
    """Data parallelism over the ranks of the default process group (``torch.nn.parallel.DistributedDataParallel``)."""

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb: float = 25,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False):
        super().__init__()
        from ...distributed import process_group as _pg
        if _pg._group is None:
            raise RuntimeError(_NEEDS_INIT)
        inner = getattr(module, "_orig_mod", module)  # tj.script(model) wraps the Module
        if not isinstance(inner, Module):
            raise TypeError(f"DistributedDataParallel wraps an nn.Module (or a compiled one), "
                            f"got {type(module).__name__}")
        if device_ids not in (None, []) or output_device is not None:
            raise ValueError("DistributedDataParallel: device_ids/output_device must be None; "
                             "tracejit's DDP replicates CPU modules, one per process")
        if process_group is not None and process_group is not _pg._group:
            raise ValueError("DistributedDataParallel: only the default process group exists "
                             "(process_group=None)")
        if bucket_cap_mb is None or bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        g = _pg._group
        self.module = inner
        object.__setattr__(self, "_call", module)
        object.__setattr__(self, "_MPI", g.MPI)
        object.__setattr__(self, "_group", g)
        self.world_size = g.size
        self.rank = g.rank
        self._generation = g.generation
        self._steps = 0            # synchronized forwards so far (step numbers in errors)
        self._join_count = None    # Work counting the ranks still training (join mode)
        self._divide_by_initial_world_size = True
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.bucket_cap_mb = bucket_cap_mb
        self.require_backward_grad_sync = True
        # True: after the reduction each .grad is a view of its bucket (one copy fewer per
        # step; the next backward writes the bucket, so keep no old .grad across steps).
        self.gradient_as_bucket_view = gradient_as_bucket_view

        named = [(n, p) for n, p in inner.named_parameters()]
        self._buffer_list = [b for _, b in inner.named_buffers()]
        self._check_same_model(g, named, list(inner.named_buffers()))
        # A private communicator: DDP's reductions never interleave with the user's collectives.
        object.__setattr__(self, "_chan", g.new_channel("DistributedDataParallel's construction")
                           if g.size > 1 else None)
        g.users.add(self)
        self._sync_from([p for _, p in named] + self._buffer_list, 0, "the initial broadcast of the model")

        trainable = [(n, p) for n, p in reversed(named) if p.requires_grad]
        self._param_names = [n for n, _ in trainable]
        object.__setattr__(self, "_params", [p for _, p in trainable])
        self._buckets = self._make_buckets(bucket_cap_mb)
        self._where = {}
        for b in self._buckets:
            for pos, off in zip(b.params, b.offsets):
                self._where[pos] = (b, off)
        self._ready = [False] * len(self._params)
        self._expect_backward = False
        self._reduced = False
        self._has_grad = None
        self._fired = 0
        self._next_launch = 0
        self._handles = [p.register_post_accumulate_grad_hook(self._hook_for(i))
                         for i, p in enumerate(self._params)]

    # ---------------------------------------------------------------- construction
    def _check_same_model(self, g, named, buffers) -> None:
        mine = [("parameter", n, tuple(p.shape), p.dtype.name, bool(p.requires_grad)) for n, p in named]
        mine += [("buffer", n, tuple(b.shape), b.dtype.name, False) for n, b in buffers]
        if g.size == 1:
            return
        everyone = g.world.allgather_obj(mine, "DistributedDataParallel's model check (construction)")
        ref = everyone[0]
        for r, theirs in enumerate(everyone[1:], start=1):
            if theirs == ref:
                continue
            for i in range(max(len(ref), len(theirs))):
                a = ref[i] if i < len(ref) else None
                b = theirs[i] if i < len(theirs) else None
                if a != b:
                    raise RuntimeError(
                        "DistributedDataParallel: the ranks built different models; "
                        f"{_entry(a, 0)} but {_entry(b, r)} (entry {i} of {len(ref)} on rank 0). "
                        "Every rank must construct the same model before wrapping it")

    def _sync_from(self, tensors: List[Tensor], src: int, what: str) -> None:
        """Broadcast rank `src`'s values, one message per dtype."""
        if self.world_size == 1 or not tensors:
            return
        by_dtype: Dict[np.dtype, List[Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(np.dtype(t._data.dtype), []).append(t)
        for dt, ts in by_dtype.items():
            flat = np.concatenate([np.ascontiguousarray(t._data).reshape(-1) for t in ts])
            wire = flat.view(np.uint16) if dt == np.float16 else flat.view(np.uint8) if dt == np.bool_ else flat
            self._chan.bcast(wire, src, what)
            off = 0
            for t in ts:
                n = t._data.size
                t._data[...] = flat[off:off + n].reshape(t._data.shape)
                t._vbox[0] += 1
                off += n

    def _make_buckets(self, cap_mb: float) -> List[_Bucket]:
        cap = int(cap_mb * 1024 * 1024)
        # As PyTorch: the first bucket holds at most 1 MB, so that the first transfer
        # starts early in the backward instead of after a full 25 MB of gradients.
        first_cap = min(cap, 1024 * 1024)
        buckets: List[_Bucket] = []
        open_by_dtype: Dict[np.dtype, _Bucket] = {}
        for pos, p in enumerate(self._params):
            dt = _bucket_dtype(p)
            b = open_by_dtype.get(dt)
            limit = first_cap if b is not None and b.index == 0 else cap
            if b is None or (b.params and b.nbytes() + p._data.size * dt.itemsize > limit):
                b = open_by_dtype[dt] = _Bucket(len(buckets), dt)
                buckets.append(b)
            b.add(pos, p._data.size)
        for b in buckets:
            b.buf = np.zeros(b.numel, b.dtype)
        return buckets

    def bucket_names(self) -> List[List[str]]:
        """Parameter names per bucket, in launch order (for inspection and tests)."""
        return [[self._param_names[i] for i in b.params] for b in self._buckets]

    # ---------------------------------------------------------------- forward
    def forward(self, *inputs, **kwargs):
        if self._group.generation != self._generation:
            self._follow_new_world()
        self._check_previous_reduction()
        sync = bool(_gm.is_grad_enabled() and self.require_backward_grad_sync and self._params)
        if sync:
            self._steps += 1
        self._group.watch.progress["ddp"] = self._describe_progress
        src = 0
        if self._get_join_config().enable:
            self._join_count = Join.notify_join_context(self)
            src, _ = self._join_exchange(active=True, sync=sync)
        if self.broadcast_buffers and self._buffer_list and self.world_size > 1:
            self._sync_from(self._buffer_list, src, f"the broadcast of buffers at step {self._steps}")
        self._reduced = False
        out = self._call(*inputs, **kwargs)
        if sync:
            self._prepare_for_backward(out)
        else:
            self._expect_backward = False
        return out

    def _describe_progress(self) -> str:
        return f"{self._steps} step{'s' if self._steps != 1 else ''} of DistributedDataParallel"

    # ---------------------------------------------------------------- uneven inputs
    def join(self, divide_by_initial_world_size: bool = True, enable: bool = True,
             throw_on_early_termination: bool = False) -> Join:
        """A context for uneven inputs: ``with model.join(): for x, y in my_batches: ...``.

        Ranks that run out of batches first shadow the others' gradient reductions with
        zeros until every rank is done; then every rank takes the model of the last one to
        finish. The average divides by the initial world size (the joined ranks count as
        zero gradients) unless ``divide_by_initial_world_size=False``, which divides by
        the number of ranks still training.
        """
        return Join([self], enable, throw_on_early_termination,
                     divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, **kwargs) -> JoinHook:
        self._divide_by_initial_world_size = kwargs.get("divide_by_initial_world_size", True)
        return DDPJoinHook(self)

    def _join_exchange(self, active: bool, sync: bool) -> tuple:
        """One small all-reduce per iteration in join mode: the highest rank still training
        (whose buffers and, at the end, model count) and whether this iteration reduces."""
        if self._chan is None:
            return self.rank, sync
        v = np.array([self.rank if active else -1, 1 if sync else 0], np.int64)
        self._chan.allreduce(v, self._MPI.MAX, f"the join check at step {self._steps}")
        return int(v[0]), bool(v[1])

    def _shadow_reduction(self) -> None:
        """A joined rank's part of one backward: zeros into every bucket's all-reduce."""
        reqs, ops = [], []
        for b in self._buckets:
            b.buf[...] = 0
            req, op = self._chan.start_allreduce(b.buf, self._MPI.SUM,
                                                 f"all-reduce of bucket {b.index} (shadowing a step, joined)")
            reqs.append(req)
            ops.append(op)
        self._chan.wait(reqs, ops)
        if self.find_unused_parameters:
            self._chan.allreduce(np.zeros(len(self._params), np.uint8), self._MPI.MAX,
                                 "the used-parameter map (shadowing a step, joined)")

    def _sync_final_model(self, is_last_joiner: bool) -> None:
        if self._chan is None:
            return
        v = np.array([self.rank if is_last_joiner else -1], np.int64)
        self._chan.allreduce(v, self._MPI.MAX, "the join context's choice of the final model")
        src = int(v[0])
        self._sync_from(list(self.module.parameters()) + self._buffer_list, src,
                        f"the final model's broadcast from rank {src} (join)")

    def _prepare_for_backward(self, out) -> None:
        self._expect_backward = True
        self._reduced = False
        self._fired = 0
        self._next_launch = 0
        self._ready = [False] * len(self._params)
        for b in self._buckets:
            b.pending = len(b.params)
            b.request = None
        self._has_grad = None
        if self.find_unused_parameters:
            used = reachable_leaves(_flatten(out))
            self._has_grad = np.ones(len(self._params), np.uint8)
            for i, p in enumerate(self._params):
                if id(p) not in used:
                    self._has_grad[i] = p.grad is not None
                    self._mark_ready(i, p)

    def _check_previous_reduction(self) -> None:
        if self._expect_backward and self._fired and not all(self._ready):
            missing = [n for n, r in zip(self._param_names, self._ready) if not r]
            self._expect_backward = False
            raise RuntimeError(
                f"DistributedDataParallel (rank {self.rank}): the previous backward produced no "
                f"gradient for parameter(s) {missing[:8]}{' ...' if len(missing) > 8 else ''}, so their "
                f"buckets were never reduced and the replicas may differ. Pass "
                f"find_unused_parameters=True if the forward legitimately leaves them unused")

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards (and their backwards) inside skip the all-reduce; gradients accumulate locally."""
        prev = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = prev

    # ---------------------------------------------------------------- backward hooks
    def _hook_for(self, i: int):
        def hook(p: Tensor) -> None:
            if self._expect_backward:
                self._mark_ready(i, p)
            elif self._reduced:
                self._reduced = False
                raise RuntimeError(
                    f"DistributedDataParallel: parameter {self._param_names[i]!r} received a gradient "
                    f"after this iteration's gradients were already averaged (a second backward "
                    f"through the same forward); its gradient would differ across ranks. Sum the "
                    f"losses and call backward once, or run a new forward per backward")
        return hook

    def _mark_ready(self, i: int, p: Tensor) -> None:
        if self._ready[i]:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {self._param_names[i]!r} received a gradient twice "
                f"in one iteration (a second backward without a forward in between, or, with "
                f"find_unused_parameters=True, a parameter used outside the forward's graph); run "
                f"a forward per backward, or use no_sync()")
        self._ready[i] = True
        self._fired += 1
        b, off = self._where[i]
        n = p._data.size
        if p.grad is None:
            b.buf[off:off + n] = 0
        else:
            b.buf[off:off + n] = p.grad._data.reshape(-1)
        b.pending -= 1
        if b.pending == 0:
            self._launch_ready_buckets()
        elif self._next_launch and self._chan is not None:
            # MPICH advances a non-blocking collective only while some MPI call runs (no
            # progress thread unless MPIR_CVAR_ASYNC_PROGRESS=1): poke the launched buckets
            # so their transfer moves on during the rest of the backward.
            try:
                self._MPI.Request.Testall([x.request for x in self._buckets[:self._next_launch]
                                           if x.request is not None])
            except self._MPI.Exception:
                pass  # a failed peer: the watched wait at the end of the backward reports it

    def _launch_ready_buckets(self) -> None:
        buckets = self._buckets
        while self._next_launch < len(buckets) and buckets[self._next_launch].pending == 0:
            b = buckets[self._next_launch]
            if self._chan is not None:
                b.request, b.op = self._chan.start_allreduce(
                    b.buf, self._MPI.SUM, f"all-reduce of bucket {b.index} at step {self._steps}", UNEVEN_HINT)
            self._next_launch += 1
        if self._next_launch == len(buckets):
            self._finish_reduction()

    def _finish_reduction(self) -> None:
        launched = [b for b in self._buckets if b.request is not None]
        if launched:
            self._chan.wait([b.request for b in launched], [b.op for b in launched])
        has_grad = self._has_grad
        if has_grad is not None and self._chan is not None:
            # Parameters no rank used keep .grad None, as in PyTorch (an optimizer then
            # skips them instead of applying, say, weight decay to a zero gradient).
            self._chan.allreduce(has_grad, self._MPI.MAX, f"the used-parameter map at step {self._steps}",
                                 UNEVEN_HINT)
        divisor = self.world_size
        if self._join_count is not None and not self._divide_by_initial_world_size:
            divisor = int(self._join_count.result()[0])
        self._join_count = None
        inv = 1.0 / divisor
        for b in self._buckets:
            b.request = None
            if divisor > 1:
                b.buf *= b.buf.dtype.type(inv) if b.buf.dtype.kind == "f" else inv
            for pos, off in zip(b.params, b.offsets):
                if has_grad is not None and not has_grad[pos]:
                    continue
                p = self._params[pos]
                n = p._data.size
                avg = b.buf[off:off + n].reshape(p._data.shape)
                grad = p.grad
                if self.gradient_as_bucket_view and avg.dtype == p._data.dtype:
                    if grad is not None and np.shares_memory(grad._data, b.buf):
                        grad._vbox[0] += 1  # already the bucket's memory: averaged in place
                    else:
                        p.grad = Tensor._wrap(avg, p.dtype, p.device)
                elif grad is None:
                    p.grad = Tensor._wrap(avg.astype(p._data.dtype), p.dtype, p.device)
                elif grad._data.flags.writeable:
                    grad._data[...] = avg
                    grad._vbox[0] += 1
                else:
                    p.grad = Tensor._wrap(avg.astype(p._data.dtype), p.dtype, p.device)
        self._expect_backward = False
        self._reduced = True

    # ---------------------------------------------------------------- a new world (shrink)
    def _follow_new_world(self) -> None:
        """After `tracejit.distributed.shrink()`: a channel on the survivors' group, the
        buckets' state reset (an interrupted step's reduction is dropped), and the replicas
        made equal from the new rank 0 (they are already, unless a rank stepped alone)."""
        g = self._group
        self._release_channels()
        self.world_size, self.rank = g.size, g.rank
        object.__setattr__(self, "_chan", g.new_channel("DistributedDataParallel's rebuild after a "
                                                        "shrink") if g.size > 1 else None)
        self._generation = g.generation
        self._expect_backward = False
        self._reduced = False
        self._join_count = None
        for b in self._buckets:
            b.request = b.op = None
            b.pending = len(b.params)
        self._sync_from(list(self.module.parameters()) + self._buffer_list, 0,
                        "the model's broadcast after a shrink")

    def _release_channels(self) -> None:
        chan = self.__dict__.get("_chan")
        if chan is not None:
            chan.free()
        object.__setattr__(self, "_chan", None)

    def extra_repr(self) -> str:
        return (f"world_size={self.world_size}, buckets={len(self._buckets)}, "
                f"bucket_cap_mb={self.bucket_cap_mb}")


def _entry(e, rank: int) -> str:
    if e is None:
        return f"rank {rank} has no such entry"
    kind, name, shape, dtype, rg = e
    return (f"rank {rank} has {kind} {name!r} of shape {shape} {dtype}"
            f"{'' if kind == 'buffer' else ' (requires_grad=' + str(rg) + ')'}")
