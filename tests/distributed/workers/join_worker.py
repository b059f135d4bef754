"""Uneven inputs with DistributedDataParallel.join() (run by tests/distributed/test_dist_join.py).

Rank r gets 2 + r batches (rank 0 the fewest). Inside ``model.join()`` every rank
finishes; the parameters must equal a single process that replays the same steps: at
step t the gradient is the sum of the gradients of the ranks that still have a batch,
divided by the world size (or, with divide_by_initial_world_size=False, by their
number). Every rank ends with the same parameters, and the group stays usable.
argv: "initial" or "active" (the divisor), then "buffers" to add a BatchNorm (its
running statistics are broadcast from the highest rank still training).
"""
import sys

import numpy as np

import tracejit as tj
import tracejit.distributed as dist
import tracejit.nn.functional as F
from tracejit import nn
from tracejit.nn.parallel import DistributedDataParallel as DDP

divisor = sys.argv[1]
with_buffers = "buffers" in sys.argv[2:]
dist.init_process_group(timeout=60.0)
r, n = dist.get_rank(), dist.get_world_size()
B = 4


def make():
    tj.manual_seed(3)
    layers = [nn.Linear(6, 8)] + ([nn.BatchNorm1d(8)] if with_buffers else []) + [nn.Tanh(), nn.Linear(8, 3)]
    return nn.Sequential(*layers)


def batches(rank):
    rng = np.random.default_rng(100 + rank)
    return [(rng.standard_normal((B, 6)).astype(np.float32), rng.integers(0, 3, B)) for _ in range(2 + rank)]


model = make()
ddp = DDP(model, bucket_cap_mb=0.0002)
opt = tj.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
with ddp.join(divide_by_initial_world_size=(divisor == "initial")):
    for x, y in batches(r):
        opt.zero_grad()
        F.cross_entropy(ddp(tj.tensor(x)), tj.tensor(y)).backward()
        opt.step()

# the reference: one process, the same steps
ref = make()
ref_opt = tj.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
per_rank = [batches(k) for k in range(n)]
for t in range(max(len(b) for b in per_rank)):
    active = [k for k in range(n) if t < len(per_rank[k])]
    total = [np.zeros(p.shape, np.float32) for p in ref.parameters()]
    top = max(active)
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    for k in active:  # each rank's forward starts from the buffers of the highest rank still training
        ref.load_state_dict(state)
        ref.zero_grad()
        F.cross_entropy(ref(tj.tensor(per_rank[k][t][0])), tj.tensor(per_rank[k][t][1])).backward()
        for acc, p in zip(total, ref.parameters()):
            acc += p.grad.numpy()
        if k == top:
            after = {k2: v.clone() for k2, v in ref.state_dict().items()}
    ref.load_state_dict(after)
    div = n if divisor == "initial" else len(active)
    for acc, p in zip(total, ref.parameters()):
        p.grad = tj.tensor(acc / div)
    ref_opt.step()

for (name, p), q in zip(model.state_dict().items(), ref.state_dict().values()):
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=2e-6, atol=2e-6, err_msg=f"rank {r}: {name}")
mine = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
got = [None] * n
dist.all_gather_object(got, mine)
for k in range(1, n):
    np.testing.assert_array_equal(got[k], got[0], err_msg=f"rank {k}'s parameters differ from rank 0's")
print(f"rank {r}/{n}: join ({divisor}{', buffers' if with_buffers else ''}) OK after {2 + r} batches", flush=True)
