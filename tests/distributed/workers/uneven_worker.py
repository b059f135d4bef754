"""Ranks that do not run the same collectives (run by tests/distributed/test_dist_watchdog.py).

argv[1] picks the scenario; every scenario must end with an error on every rank, never hang:
  exit      rank 1 has 2 batches, rank 0 has 3; rank 1's script then ends
  barrier   as exit, but rank 1 goes on to a barrier after its loop
  sysexit   rank 1 calls sys.exit(3) at the start of step 3
  timeout   rank 1 is stuck (sleeping) in step 2; the group's timeout is 2 s
  destroy   rank 1 calls destroy_process_group() after 1 step
  object    rank 1 leaves while rank 0 waits in all_gather_object
"""
import sys
import time

import numpy as np

import tracejit as tj
import tracejit.distributed as dist
import tracejit.nn.functional as F
from tracejit import nn
from tracejit.nn.parallel import DistributedDataParallel as DDP

scenario = sys.argv[1]
dist.init_process_group(timeout=2.0 if scenario == "timeout" else 60.0)
r, n = dist.get_rank(), dist.get_world_size()
tj.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
ddp = DDP(model, bucket_cap_mb=0.0002)  # one bucket per parameter
opt = tj.optim.SGD(ddp.parameters(), lr=0.1)
rng = np.random.default_rng(r)
batches = 2 if (r == 1 and scenario in ("exit", "barrier")) else 3
if scenario == "object":
    if r == 0:
        dist.all_gather_object([None] * n, "rank 0's metric")
    sys.exit(0)
for step in range(1, batches + 1):
    if scenario == "sysexit" and r == 1 and step == 3:
        print(f"rank {r}: calling sys.exit(3) at step {step}", flush=True)
        sys.exit(3)
    if scenario == "destroy" and r == 1 and step == 2:
        dist.destroy_process_group()
        sys.exit(0)
    x = tj.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    y = tj.tensor(rng.integers(0, 3, 4))
    opt.zero_grad()
    loss = F.cross_entropy(ddp(x), y)
    if scenario == "timeout" and r == 1 and step == 2:
        print(f"rank {r}: stuck in step {step}", flush=True)
        time.sleep(60)
    loss.backward()
    opt.step()
    print(f"rank {r}: step {step} done", flush=True)
if scenario == "barrier":
    dist.barrier()
print(f"rank {r}: finished without error", flush=True)
