"""Going on with the survivors (ULFM; run by tests/distributed/test_dist_ulfm.py under Open MPI
with ``mpiexec --with-ft ulfm``).

argv: checkpoint path, output path, mode.
  fail    3 ranks; rank 0 checkpoints after step 2; rank 2 dies (SIGKILL) at the start of
          step 3; the survivors catch ProcessFailedError, shrink(), rebuild the sampler for
          2 ranks from the samples consumed so far, repeat step 3 and finish step 5.
  resume  2 ranks start from that checkpoint and run steps 3-5: the reference.
Rank 0 saves the final parameters to the output path.
"""
import os
import signal
import sys

import numpy as np

import tracejit as tj
import tracejit.distributed as dist
import tracejit.nn.functional as F
from tracejit import nn
from tracejit.distributed.checkpoint import load_checkpoint, save_checkpoint
from tracejit.nn.parallel import DistributedDataParallel as DDP
from tracejit.utils.data import DistributedSampler

ckpt_path, out_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
dist.init_process_group(fault_tolerant=True, timeout=60.0)
r, n = dist.get_rank(), dist.get_world_size()
STEPS, B, FAIL_AT = 6, 4, 3
rng = np.random.default_rng(11)
X = rng.standard_normal((72, 6)).astype(np.float32)
Y = rng.integers(0, 3, 72)

tj.manual_seed(2)
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
ddp = DDP(model, bucket_cap_mb=0.0002)
opt = tj.optim.Adam(ddp.parameters(), lr=0.01)
step, consumed = 0, 0
if mode == "resume":
    state = load_checkpoint(ckpt_path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    step, consumed = state["step"], state["consumed"]


def shard():
    s = DistributedSampler(range(len(X)), num_replicas=n, rank=r, seed=3)
    s.set_epoch(0, start=consumed)
    return list(s)


mine, k = shard(), 0
while step < STEPS:
    if mode == "fail" and step == FAIL_AT and r == n - 1 and n == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    idx = mine[k * B:(k + 1) * B]
    try:
        opt.zero_grad()
        F.cross_entropy(ddp(tj.tensor(X[idx])), tj.tensor(Y[idx])).backward()
    except dist.ProcessFailedError as exc:
        print(f"rank {r}: step {step}: {type(exc).__name__}: {exc}", flush=True)
        dist.shrink()
        r, n = dist.get_rank(), dist.get_world_size()
        print(f"rank {r}/{n} after shrink: repeating step {step} from sample {consumed}", flush=True)
        mine, k = shard(), 0
        continue
    opt.step()
    step, k, consumed = step + 1, k + 1, consumed + B * n
    if mode == "fail" and step == FAIL_AT:
        save_checkpoint(ckpt_path, model=model.state_dict(), optimizer=opt.state_dict(), step=step,
                        consumed=consumed)
if r == 0:
    tj.save(model.state_dict(), out_path)
print(f"rank {r}/{n}: {mode} finished {step} steps, {consumed} samples", flush=True)
