"""Every collective against numpy, on however many ranks mpiexec started (run by
tests/distributed/test_dist_collectives.py). Fails by raising: the fault handler aborts the job."""
import sys

import numpy as np

import tracejit as tj
import tracejit.distributed as dist
from tracejit.distributed import ReduceOp

assert "mpi4py" not in sys.modules, "import tracejit must not import mpi4py"
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "mpi"


def data(rank, shape=(3, 4), dtype=np.float32, lo=None):
    g = np.random.default_rng(100 + rank)
    if np.dtype(dtype).kind in "iu":
        return g.integers(1, 7, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return g.random(shape) < 0.3
    return (g.random(shape) + 0.5).astype(dtype)


every = [data(k) for k in range(n)]
expected = {ReduceOp.SUM: np.sum(every, 0), ReduceOp.AVG: np.mean(every, 0), ReduceOp.MAX: np.max(every, 0),
            ReduceOp.MIN: np.min(every, 0), ReduceOp.PRODUCT: np.prod(every, 0)}
for op, want in expected.items():
    t = tj.tensor(data(r))
    v0 = t._version
    assert dist.all_reduce(t, op=op) is None
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, err_msg=f"all_reduce {op}")
    assert t._version > v0, "all_reduce must bump the version counter"

ints = [data(k, dtype=np.int64) for k in range(n)]
for op, fn in [(ReduceOp.SUM, np.sum), (ReduceOp.BAND, np.bitwise_and.reduce), (ReduceOp.BOR, np.bitwise_or.reduce),
               (ReduceOp.BXOR, np.bitwise_xor.reduce)]:
    t = tj.tensor(data(r, dtype=np.int64))
    dist.all_reduce(t, op)
    np.testing.assert_array_equal(t.numpy(), fn(np.stack(ints), axis=0), err_msg=f"int64 {op}")
    assert t.dtype is tj.int64

# float16 is reduced in float32, bool as uint8; float64 natively
t = tj.tensor(data(r, dtype=np.float16))
dist.all_reduce(t)
np.testing.assert_allclose(t.numpy(), np.sum([data(k, dtype=np.float16).astype(np.float32) for k in range(n)], 0)
                           .astype(np.float16), rtol=1e-3)
assert t.dtype is tj.float16
t = tj.tensor(data(r, dtype=np.bool_))
dist.all_reduce(t, ReduceOp.MAX)
np.testing.assert_array_equal(t.numpy(), np.any([data(k, dtype=np.bool_) for k in range(n)], 0))
t = tj.tensor(data(r, dtype=np.float64))
dist.all_reduce(t, ReduceOp.AVG)
np.testing.assert_allclose(t.numpy(), np.mean([data(k, dtype=np.float64) for k in range(n)], 0), rtol=1e-12)

# a non-contiguous view: the result lands in the base's memory
base = tj.tensor(data(r))
view = base.t()
dist.all_reduce(view)
np.testing.assert_allclose(base.numpy(), expected[ReduceOp.SUM], rtol=1e-6)

# async: a Work whose wait() completes the op (AVG's division happens there)
t = tj.tensor(data(r))
w = dist.all_reduce(t, ReduceOp.AVG, async_op=True)
assert isinstance(w, dist.Work)
assert w.wait() is True and w.is_completed()
np.testing.assert_allclose(t.numpy(), expected[ReduceOp.AVG], rtol=1e-6)
works = [dist.all_reduce(tj.tensor(data(r)), async_op=True) for _ in range(3)]
for w in works:
    w.wait()

# broadcast from the last rank (sync and async)
for async_op in (False, True):
    t = tj.tensor(data(r))
    w = dist.broadcast(t, src=n - 1, async_op=async_op)
    if async_op:
        w.wait()
    np.testing.assert_array_equal(t.numpy(), every[n - 1])
t = tj.tensor(data(r, dtype=np.float16))
dist.broadcast(t, 0)
np.testing.assert_array_equal(t.numpy(), data(0, dtype=np.float16))

# all_gather / all_gather_into_tensor
outs = [tj.zeros(3, 4) for _ in range(n)]
dist.all_gather(outs, tj.tensor(data(r)))
for k in range(n):
    np.testing.assert_array_equal(outs[k].numpy(), every[k])
out = tj.zeros(n * 3, 4)
dist.all_gather_into_tensor(out, tj.tensor(data(r)), async_op=True).wait()
np.testing.assert_array_equal(out.numpy(), np.concatenate(every))

# reduce_scatter: rank k gets the sum over ranks of their input_list[k]
chunks = lambda rank: [data(rank * 10 + k, shape=(5,)) for k in range(n)]  # noqa: E731
want = np.sum([chunks(q)[r] for q in range(n)], 0)
o = tj.zeros(5)
dist.reduce_scatter(o, [tj.tensor(c) for c in chunks(r)])
np.testing.assert_allclose(o.numpy(), want, rtol=1e-6)
o = tj.zeros(5)
dist.reduce_scatter_tensor(o, tj.tensor(np.concatenate(chunks(r))), ReduceOp.AVG)
np.testing.assert_allclose(o.numpy(), want / n, rtol=1e-6)

# reduce to rank 1 % n; others unchanged
dst = 1 % n
t = tj.tensor(data(r))
dist.reduce(t, dst=dst, op=ReduceOp.MAX)
np.testing.assert_array_equal(t.numpy(), expected[ReduceOp.MAX] if r == dst else every[r])

# gather / scatter
gl = [tj.zeros(3, 4) for _ in range(n)] if r == 0 else None
dist.gather(tj.tensor(data(r)), gl, dst=0)
if r == 0:
    for k in range(n):
        np.testing.assert_array_equal(gl[k].numpy(), every[k])
t = tj.zeros(3, 4)
dist.scatter(t, [tj.tensor(data(k + 50)) for k in range(n)] if r == n - 1 else None, src=n - 1)
np.testing.assert_array_equal(t.numpy(), data(r + 50))

# Python objects
objs = [{"step": 3, "rank": r}, "x"] if r == 0 else [None, None]
dist.broadcast_object_list(objs, src=0)
assert objs == [{"step": 3, "rank": 0}, "x"]
got = [None] * n
dist.all_gather_object(got, ("r", r))
assert got == [("r", k) for k in range(n)]
dist.barrier()
dist.barrier(async_op=True).wait()

# DistributedSampler takes rank and world size from the group: equal, covering shards
from tracejit.utils.data import DistributedSampler  # noqa: E402
sampler = DistributedSampler(range(10), seed=5)
sampler.set_epoch(2)
got = [None] * n
dist.all_gather_object(got, list(sampler))
assert len({len(s) for s in got}) == 1 and sorted(set(i for s in got for i in s)) == list(range(10)), got
other = DistributedSampler(range(10), n, r, seed=5)
other.set_epoch(2)
assert got[r] == list(other)

# mismatches are detected on every rank and named; the group keeps working afterwards
if n > 1:
    shape = (3, 4) if r == 0 else (3, 5)
    try:
        dist.all_reduce(tj.ones(*shape))
    except RuntimeError as exc:
        msg = str(exc)
        assert "all_reduce" in msg and "(3, 4)" in msg and "(3, 5)" in msg and "rank 0" in msg, msg
    else:
        raise AssertionError("shape mismatch not detected")
    try:
        dist.broadcast(tj.ones(4, dtype=tj.float64 if r == n - 1 else tj.float32))
    except RuntimeError as exc:
        assert "float64" in str(exc) and "float32" in str(exc), str(exc)
    else:
        raise AssertionError("dtype mismatch not detected")
    try:  # wrong arguments on one rank only: every rank raises, none waits
        dist.all_gather([tj.zeros(3, 4)] * (n if r else n - 1), tj.zeros(3, 4))
    except ValueError as exc:
        assert "rank 0" in str(exc) and "tensor_list" in str(exc), str(exc)
    else:
        raise AssertionError("bad tensor_list not detected")
t = tj.tensor(data(r))
dist.all_reduce(t)
np.testing.assert_allclose(t.numpy(), expected[ReduceOp.SUM], rtol=1e-6)

# errors without raising MPI: bad arguments
try:
    dist.init_process_group()
except RuntimeError as exc:
    assert "already initialized" in str(exc)
else:
    raise AssertionError("second init_process_group accepted")
dist.destroy_process_group()
assert not dist.is_initialized()
try:
    dist.all_reduce(tj.ones(2))
except RuntimeError as exc:
    assert "init_process_group()" in str(exc)
else:
    raise AssertionError("collective without a group accepted")
dist.init_process_group()  # a new group after destroy
t = tj.tensor([float(r)])
dist.all_reduce(t)
assert t.item() == n * (n - 1) / 2
print(f"rank {r}/{n}: collectives OK", flush=True)
