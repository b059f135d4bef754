"""`DistributedSampler`: each rank draws its own shard of a dataset (``torch.utils.data.DistributedSampler``).

Every rank computes the same (optionally shuffled) order from ``seed + epoch``, pads it
by repeating indices from its start until it divides evenly (or, with ``drop_last``,
cuts the tail), and keeps every ``num_replicas``-th index starting at its rank, so the
shards are disjoint apart from padding and equally long (DDP's all-reduce needs every
rank to run the same number of steps). The shuffled order comes from numpy's
generator, so it is not torch's order; the padding and striding are PyTorch's.
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
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            order = np.arange(n)
        if self.drop_last:
            order = order[:self.total_size]
        elif self.total_size > n and n > 0:
            order = np.resize(order, self.total_size)  # repeats from the start, as PyTorch pads
        return iter(order[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Call at the start of each epoch so that every epoch has its own shuffled order."""
        self.epoch = epoch
