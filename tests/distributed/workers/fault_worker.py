"""One rank raises while the others wait in a collective: the whole job must end at once
with the error named (run by tests/distributed/test_dist_faults.py)."""
import sys

import tracejit as tj
import tracejit.distributed as dist

dist.init_process_group()
r = dist.get_rank()
if r == dist.get_world_size() - 1:
    raise ValueError(f"boom from rank {r}")
dist.all_reduce(tj.ones(4))  # never completes: the raising rank aborts the job
print("unreachable", flush=True)
sys.exit(0)
