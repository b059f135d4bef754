"""DistributedDataParallel on N ranks, each on its shard, against single-process training
on the full batch, step by step (run by tests/distributed/test_dist_ddp.py).

argv: a scratch directory (for the rank-0 checkpoint) and the modes to run
("eager", "script", "trace"). Fails by raising: the fault handler aborts the job.
"""
import os
import sys

import numpy as np

import tracejit as tj
import tracejit.distributed as dist
import tracejit.nn.functional as F
from tracejit import nn
from tracejit.nn.parallel import DistributedDataParallel as DDP

scratch = sys.argv[1]
modes = sys.argv[2:] or ["eager"]
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
B = 12  # divisible by 1, 2, 3 and 4 ranks
data_rng = np.random.default_rng(7)
X = data_rng.standard_normal((4, 2 * B, 6)).astype(np.float32)   # 4 steps x 2 micro-batches
Y = data_rng.integers(0, 4, size=(4, 2 * B))
lo, hi = r * B // n, (r + 1) * B // n


class Net(nn.Module):
    def __init__(self, hidden=16, unused=False):
        super().__init__()
        self.fc1 = nn.Linear(6, hidden)
        self.fc2 = nn.Linear(hidden, 4)
        self.register_buffer("shift", tj.zeros(6))
        if unused:
            self.extra = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc2(tj.tanh(self.fc1(x + self.shift)))


def fresh(**kw):
    tj.manual_seed(1000 + r)  # different on every rank: DDP must copy rank 0's
    return Net(**kw)


def replicas_equal(params, what):
    for p in params:
        got = [tj.zeros_like(p) for _ in range(n)]
        dist.all_gather(got, p.detach())
        for k in range(1, n):
            np.testing.assert_array_equal(got[k].numpy(), got[0].numpy(), err_msg=f"{what}: rank {k} differs")


def close(a, b, what, tol):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol, err_msg=what)


def train_and_compare(mode, opt_name, cap_mb, tol, as_view=False):
    model = fresh()
    model.shift.copy_(tj.full((6,), float(r)))  # buffers too start from rank 0's
    wrapped = {"eager": model, "script": tj.script(model) if mode == "script" else None,
               "trace": tj.trace(model) if mode == "trace" else None}[mode]
    launched_before_last = []
    if mode == "eager":
        # Registered before DDP's own hooks, so it runs just before DDP sees fc1.weight's
        # gradient (the last to arrive): the fc2 buckets must already be on the wire.
        model.fc1.weight.register_post_accumulate_grad_hook(
            lambda p: launched_before_last.append(ddp._next_launch))
    ddp = DDP(wrapped, bucket_cap_mb=cap_mb, gradient_as_bucket_view=as_view)
    replicas_equal(list(model.parameters()) + [model.shift], "after construction")
    np.testing.assert_array_equal(model.shift.numpy(), np.zeros(6))
    ref = Net()
    ref.load_state_dict(model.state_dict())
    make = {"sgd": lambda ps: tj.optim.SGD(ps, lr=0.1, momentum=0.9),
            "adam": lambda ps: tj.optim.Adam(ps, lr=0.01)}[opt_name]
    opt, ref_opt = make(ddp.parameters()), make(ref.parameters())
    for step in range(3):
        x, y = X[step, :B], Y[step, :B]
        opt.zero_grad(set_to_none=not as_view)  # as_view: accumulate into the bucket's memory
        out = ddp(tj.tensor(x[lo:hi]))
        if mode != "eager":  # the compiled program ran, and its backward fired DDP's hooks
            assert out.grad_fn.name().startswith("Compiled"), out.grad_fn.name()
        F.cross_entropy(out, tj.tensor(y[lo:hi])).backward()
        ref_opt.zero_grad()
        F.cross_entropy(ref(tj.tensor(x)), tj.tensor(y)).backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p.grad, q.grad, f"{mode}/{opt_name} step {step}: grad of {name}", tol)
        opt.step()
        ref_opt.step()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p, q, f"{mode}/{opt_name} step {step}: {name}", tol)
    replicas_equal(model.parameters(), f"{mode}/{opt_name} after training")
    if mode == "eager" and len(ddp.bucket_names()) > 1:
        assert launched_before_last and min(launched_before_last) >= 2, launched_before_last
    return ddp, model


# buckets: reverse parameter order; a tiny cap gives one bucket per parameter
tol = 2e-6
ddp, model = train_and_compare("eager", "sgd", 25, tol)
assert ddp.bucket_names() == [["fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"]], ddp.bucket_names()
ddp, _ = train_and_compare("eager", "adam", 0.0002, tol)
assert ddp.bucket_names() == [["fc2.bias"], ["fc2.weight"], ["fc1.bias"], ["fc1.weight"]], ddp.bucket_names()
ddp, model = train_and_compare("eager", "adam", 0.0002, tol, as_view=True)
assert all(np.shares_memory(p.grad._data, b.buf) for p, b in zip(ddp._params, [ddp._where[i][0] for i in range(4)]))
print(f"rank {r}: eager sgd/adam OK", flush=True)
for mode in modes:
    if mode == "eager":
        continue
    train_and_compare(mode, "sgd", 0.0002, 2e-5)
    train_and_compare(mode, "adam", 25, 2e-5)
    print(f"rank {r}: {mode} sgd/adam OK", flush=True)

# no_sync: the first micro-batch accumulates locally, the second backward reduces the sum
model = fresh()
ddp = DDP(model, bucket_cap_mb=0.0002)
ref = Net()
ref.load_state_dict(model.state_dict())
local = Net()
local.load_state_dict(model.state_dict())
xa, ya, xb, yb = X[3, :B], Y[3, :B], X[3, B:], Y[3, B:]
with ddp.no_sync():
    F.cross_entropy(ddp(tj.tensor(xa[lo:hi])), tj.tensor(ya[lo:hi])).backward()
F.cross_entropy(local(tj.tensor(xa[lo:hi])), tj.tensor(ya[lo:hi])).backward()
for p, q in zip(model.parameters(), local.parameters()):
    close(p.grad, q.grad, "no_sync leaves the local gradient", 1e-7)
F.cross_entropy(ddp(tj.tensor(xb[lo:hi])), tj.tensor(yb[lo:hi])).backward()
(F.cross_entropy(ref(tj.tensor(xa)), tj.tensor(ya)) + F.cross_entropy(ref(tj.tensor(xb)), tj.tensor(yb))).backward()
for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    close(p.grad, q.grad, f"no_sync accumulation then sync: {name}", tol)
replicas_equal([p.grad for p in model.parameters()], "gradients after the synced backward")
print(f"rank {r}: no_sync OK", flush=True)

# a second backward through the same forward would leave unaveraged gradients: it raises
model = fresh()
ddp = DDP(model)
loss = F.cross_entropy(ddp(tj.tensor(X[0, lo:hi])), tj.tensor(Y[0, lo:hi]))
loss.backward(retain_graph=True)
try:
    loss.backward()
except RuntimeError as exc:
    assert "already averaged" in str(exc), str(exc)
else:
    raise AssertionError("a second backward through one forward was accepted")

# broadcast_buffers: each forward starts from rank 0's buffers
model = fresh()
ddp = DDP(model)
model.shift.copy_(tj.full((6,), float(r + 1)))
ddp(tj.tensor(X[0, :2]))
np.testing.assert_array_equal(model.shift.numpy(), np.ones(6))

# unused parameters: an error naming them, or find_unused_parameters=True
model = fresh(unused=True)
ddp = DDP(model)
F.cross_entropy(ddp(tj.tensor(X[0, lo:hi])), tj.tensor(Y[0, lo:hi])).backward()
try:
    ddp(tj.tensor(X[0, lo:hi]))
except RuntimeError as exc:
    assert "extra.weight" in str(exc) and "find_unused_parameters=True" in str(exc), str(exc)
else:
    raise AssertionError("an unfinished reduction was not reported")
model = fresh(unused=True)
ddp = DDP(model, find_unused_parameters=True, bucket_cap_mb=0.0002)
ref = Net(unused=True)
ref.load_state_dict(model.state_dict())
for step in range(2):
    model.zero_grad()
    ref.zero_grad()
    F.cross_entropy(ddp(tj.tensor(X[step, lo:hi])), tj.tensor(Y[step, lo:hi])).backward()
    F.cross_entropy(ref(tj.tensor(X[step, :B])), tj.tensor(Y[step, :B])).backward()
    close(model.fc1.weight.grad, ref.fc1.weight.grad, "find_unused_parameters grads", tol)
    assert model.extra.weight.grad is None  # unused on every rank: no gradient, as in PyTorch
# used on some ranks only: the others contribute zeros, every rank gets the average
class Sometimes(Net):
    def forward(self, x):
        aux = self.extra(tj.ones(1, 3)).sum() if r == 0 else tj.zeros(())
        return super().forward(x), aux


tj.manual_seed(1000 + r)
model = Sometimes(unused=True)
ddp = DDP(model, find_unused_parameters=True)
out, aux = ddp(tj.tensor(X[0, lo:hi]))
(F.cross_entropy(out, tj.tensor(Y[0, lo:hi])) + aux).backward()
# d/dW sum(W @ 1 + b) = ones on rank 0, nothing elsewhere: the average is ones / n
np.testing.assert_allclose(model.extra.weight.grad.numpy(), np.ones((3, 3)) / n, rtol=1e-6)
np.testing.assert_allclose(model.extra.bias.grad.numpy(), np.ones(3) / n, rtol=1e-6)
print(f"rank {r}: buffers and unused parameters OK", flush=True)

# different models on different ranks: every rank raises, naming the first difference
if n > 1:
    try:
        DDP(fresh(hidden=16 if r == 0 else 17))
    except RuntimeError as exc:
        msg = str(exc)
        assert "fc1.weight" in msg and "(16, 6)" in msg and "(17, 6)" in msg, msg
    else:
        raise AssertionError("different models were not detected")

for bad in ({"device_ids": [0]}, {"process_group": object()}, {"bucket_cap_mb": 0}):
    try:
        DDP(fresh(), **bad)
    except ValueError as exc:
        assert next(iter(bad)) in str(exc), str(exc)
    else:
        raise AssertionError(f"DDP accepted {bad}")

# save on rank 0, load everywhere
path = os.path.join(scratch, "ddp.pt")
if r == 0:
    tj.save(ddp.module.state_dict(), path)
    assert set(ddp.state_dict()) == {"module." + k for k in model.state_dict()}
dist.barrier()
loaded = Net(unused=True)
loaded.load_state_dict(tj.load(path))
for (name, p), q in zip(model.named_parameters(), loaded.parameters()):
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=f"loaded {name}")
print(f"rank {r}/{n}: ddp OK", flush=True)
