"""What a joined rank runs for DistributedDataParallel inside ``model.join()``.

Each iteration of a rank still training runs, on DDP's communicator: the join check (one
all-reduce: the highest rank still training and whether this iteration reduces
gradients), the broadcast of buffers from that rank (``broadcast_buffers``), then, when
it reduces, one all-reduce per bucket (and the used-parameter map with
``find_unused_parameters``). A joined rank's `main_hook` runs the same sequence with
zeros; its gradients, optimizer and parameters stay as they were. When all have joined,
`post_hook` broadcasts the parameters and buffers of the highest-numbered rank among the
last to join (PyTorch's choice), so every replica ends equal.
"""
from __future__ import annotations

from ...distributed.algorithms.join import JoinHook

__all__ = ["DDPJoinHook"]


class DDPJoinHook(JoinHook):
    def __init__(self, ddp) -> None:
        self.ddp = ddp

    def main_hook(self) -> None:
        ddp = self.ddp
        src, sync = ddp._join_exchange(active=False, sync=False)
        if ddp.broadcast_buffers and ddp._buffer_list and ddp.world_size > 1:
            ddp._sync_from(ddp._buffer_list, src, "the broadcast of buffers (shadowing a step, joined)")
        if sync and ddp._chan is not None:
            ddp._shadow_reduction()

    def post_hook(self, is_last_joiner: bool) -> None:
        self.ddp._sync_final_model(is_last_joiner)
