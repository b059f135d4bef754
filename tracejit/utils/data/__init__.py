"""``tracejit.utils.data``: datasets, samplers, ``DataLoader`` and collation, laid out as
``torch.utils.data`` is (``.dataset``, ``.sampler``, ``.dataloader``, ``.distributed``), so
``from tracejit.utils.data.dataloader import default_collate`` works where programs write it.

With ``num_workers=0`` loading happens in the calling process; with ``num_workers > 0``
worker processes load and collate the batches the parent's sampler chose, so the batches
and their order are those of ``num_workers=0`` (see `_workers`). Shuffling draws from
tracejit's global generator, so ``tracejit.manual_seed`` makes the order reproducible.
"""
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset,  # noqa: F401
                      Subset, TensorDataset, random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,  # noqa: F401
                      SubsetRandomSampler, WeightedRandomSampler)
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info  # noqa: F401
from .distributed import DistributedSampler  # noqa: F401
from . import _utils  # noqa: F401

__all__ = ["get_worker_info", "Dataset", "IterableDataset", "TensorDataset", "StackDataset", "Subset",
           "ConcatDataset", "ChainDataset", "random_split", "Sampler", "SequentialSampler",
           "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler",
           "DataLoader", "default_collate", "default_convert", "DistributedSampler"]
