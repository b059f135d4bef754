"""`DistributedSampler`: each rank draws its own shard of a dataset (``torch.utils.data.DistributedSampler``).

Every rank computes the same (optionally shuffled) order from ``seed + epoch``, pads it
by repeating indices from its start until it divides evenly (or, with ``drop_last``,
cuts the tail), and keeps every ``num_replicas``-th index starting at its rank, so the
shards are disjoint apart from padding and equally long (DDP's all-reduce needs every
rank to run the same number of steps). The shuffled order comes from numpy's
generator, so it is not torch's order; the padding and striding are PyTorch's.

Resuming mid-epoch: ``set_epoch(epoch, start=k)`` skips the first k positions of the
epoch's order (k = the samples all ranks consumed, e.g. steps x batch x world size) and
strides the rest over the ranks, padding from the order's start as before; with the
same world size each rank gets exactly the tail of what it would have drawn. With a
different world size (after a shrink) the remaining samples are re-striped over the
new ranks. ``state_dict()``/``load_state_dict()`` carry epoch, start and seed.
"""
from __future__ import annotations

import math
from typing import Iterator, Optional

import numpy as np

from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            from ... import distributed as dist
            if not dist.is_initialized():
                raise RuntimeError("DistributedSampler: pass num_replicas and rank, or call "
                                   "tracejit.distributed.init_process_group() first")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: invalid rank {rank}, rank should be in the "
                             f"interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.start = 0
        self._sizes()

    def _sizes(self) -> None:
        rest = max(len(self.dataset) - self.start, 0)
        r = self.num_replicas
        if self.drop_last and rest % r != 0:
            self.num_samples = rest // r
        else:
            self.num_samples = math.ceil(rest / r)
        self.total_size = self.num_samples * r

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            order = np.arange(n)
        rest = order[self.start:]
        if self.drop_last:
            rest = rest[:self.total_size]
        elif self.total_size > len(rest) and n > 0:
            # pad by repeating the epoch's order from its start, as PyTorch pads
            rest = np.concatenate([rest, np.resize(order, self.total_size - len(rest))])
        return iter(rest[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Call at the start of each epoch so that every epoch has its own shuffled order.

        ``start``: positions of the epoch's order already consumed by all ranks together
        (resuming mid-epoch); 0 starts the epoch from its beginning.
        """
        n = len(self.dataset)
        if not isinstance(start, (int, np.integer)) or not 0 <= start <= n:
            raise ValueError(f"DistributedSampler.set_epoch: start must be an int in [0, {n}] (samples "
                             f"of the epoch already consumed), got {start!r}")
        self.epoch = epoch
        self.start = int(start)
        self._sizes()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "start": self.start, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()` (the world size may differ: the rest is re-striped)."""
        missing = {"epoch", "start", "seed"} - set(state)
        if missing:
            raise ValueError(f"DistributedSampler.load_state_dict: missing {sorted(missing)}")
        self.seed = int(state["seed"])
        self.set_epoch(int(state["epoch"]), int(state["start"]))
