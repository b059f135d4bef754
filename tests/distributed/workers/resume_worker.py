"""Train with checkpoints, optionally killing rank 1 mid-run (run by tests/distributed/test_dist_restart.py
through ``python -m tracejit.distributed.run``).

argv: checkpoint path, output path (rank 0 saves the final parameters there), then
"kill" to SIGKILL rank 1 at global step 7 on the first attempt. The model has dropout
(per-rank random state), the sampler shuffles per epoch, Adam keeps state: a resumed run
equals an uninterrupted one only if all of it was restored.
"""
import os
import signal
import sys

import numpy as np

import tracejit as tj
import tracejit.distributed as dist
import tracejit.nn.functional as F
from tracejit import nn
from tracejit.data import DataLoader, TensorDataset
from tracejit.distributed.checkpoint import load_checkpoint, save_checkpoint
from tracejit.nn.parallel import DistributedDataParallel as DDP
from tracejit.utils.data import DistributedSampler

ckpt_path, out_path = sys.argv[1], sys.argv[2]
kill = "kill" in sys.argv[3:]
dist.init_process_group(timeout=60.0)
r, n = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ.get("TRACEJIT_RESTART_COUNT", "0"))
EPOCHS, BATCH, EVERY = 3, 4, 2

data_rng = np.random.default_rng(5)
ds = TensorDataset(tj.tensor(data_rng.standard_normal((40, 6)).astype(np.float32)),
                   tj.tensor(data_rng.integers(0, 3, 40)))
tj.manual_seed(1)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
tj.manual_seed(10 + r)  # dropout masks differ per rank
ddp = DDP(model)
opt = tj.optim.Adam(ddp.parameters(), lr=0.01)
sampler = DistributedSampler(ds, seed=7)
loader = DataLoader(ds, batch_size=BATCH, sampler=sampler)

epoch0, step0 = 0, 0
state = load_checkpoint(ckpt_path)
if state is not None:
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    epoch0, step0 = state["epoch"], state["step"]
    print(f"rank {r}: attempt {attempt} resumes at epoch {epoch0} step {step0}", flush=True)
steps_per_epoch = len(sampler) // BATCH
g = epoch0 * steps_per_epoch + step0
for epoch in range(epoch0, EPOCHS):
    start = step0 if epoch == epoch0 else 0
    sampler.set_epoch(epoch, start=start * BATCH * n)
    for step, (x, y) in enumerate(loader, start=start):
        if kill and attempt == 0 and r == 1 and g == 7:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        g += 1
        if (step + 1) % EVERY == 0 or step + 1 == steps_per_epoch:
            done = step + 1 == steps_per_epoch
            save_checkpoint(ckpt_path, model=model.state_dict(), optimizer=opt.state_dict(),
                            epoch=epoch + 1 if done else epoch, step=0 if done else step + 1)
if r == 0:
    tj.save(model.state_dict(), out_path)
print(f"rank {r}: finished {g} steps on attempt {attempt}", flush=True)
