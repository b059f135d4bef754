"""Datasets, as in ``torch.utils.data.dataset``: map-style (`Dataset`), streams
(`IterableDataset`), tensors side by side (`TensorDataset`), subsets, concatenations and
`random_split`."""
from __future__ import annotations

import math
import numbers
from typing import Iterable, Sequence

import numpy as np

from ...tensor import Tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "Subset", "ConcatDataset",
           "ChainDataset", "random_split"]


class Dataset:
    """A map-style dataset: implement ``__getitem__(index)`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: implement ``__iter__``."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other: "Dataset") -> "ChainDataset":
        return ChainDataset([self, other])   # (streams chain; they have no index to concatenate by)


class TensorDataset(Dataset):
    """Sample i is ``tuple(t[i] for t in tensors)``; all tensors share their first dimension."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset: argument {i} is a {type(t).__name__}, not a Tensor")
            if t.ndim == 0:
                raise ValueError(f"TensorDataset: argument {i} is 0-d; tensors need a first dimension")
        n = tensors[0].shape[0]
        bad = [(i, t.shape[0]) for i, t in enumerate(tensors) if t.shape[0] != n]
        if bad:
            raise ValueError(f"TensorDataset: size mismatch between tensors: tensor 0 has {n} rows but "
                             + ", ".join(f"tensor {i} has {m}" for i, m in bad))
        self.tensors = tuple(tensors)

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset = dataset
        self.indices = [int(i) for i in indices]

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        """The samples at `indices` (the DataLoader's batched read), through the dataset's own
        ``__getitems__`` where it has one."""
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for i, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise TypeError(f"ConcatDataset does not support IterableDataset (dataset {i} is a "
                                f"{type(d).__name__}); use ChainDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]).tolist())

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int):
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"ConcatDataset: index {idx} out of range for length {n}")
        idx %= n
        k = int(np.searchsorted(self.cumulative_sizes, idx, side="right"))
        start = self.cumulative_sizes[k - 1] if k > 0 else 0
        return self.datasets[k][idx - start]


def random_split(dataset: Dataset, lengths: Sequence[float], generator=None) -> list[Subset]:
    """Split into non-overlapping Subsets of the given lengths (or fractions summing to 1)."""
    from ...ops.random import randperm
    n = len(dataset)
    lengths = list(lengths)
    if lengths and math.isclose(sum(lengths), 1.0) and sum(lengths) <= 1:   # fractions, as PyTorch reads them
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):  # distribute the remainder round-robin, like PyTorch
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if any(not isinstance(x, numbers.Integral) or x < 0 for x in lengths) or sum(lengths) != n:
        raise ValueError(f"random_split: lengths {lengths} must be non-negative ints summing to the "
                         f"dataset length {n} (or fractions summing to 1)")
    perm = randperm(n, generator=generator).tolist()
    out, start = [], 0
    for ln in lengths:
        out.append(Subset(dataset, perm[start:start + ln]))
        start += ln
    return out


class ChainDataset(IterableDataset):
    """Several IterableDatasets one after the other."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError(f"ChainDataset only supports IterableDataset, got {type(d).__name__}")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class StackDataset(Dataset):
    """Samples of several equally long datasets side by side: a tuple (positional) or a dict
    (keywords) of their items."""

    def __init__(self, *args: Dataset, **kwargs: Dataset):
        if args and kwargs:
            raise ValueError("StackDataset: give datasets as positional or as keyword arguments, not both")
        if not args and not kwargs:
            raise ValueError("StackDataset: at least one dataset is needed")
        self.datasets = args or kwargs
        lengths = {len(d) for d in (args or kwargs.values())}
        if len(lengths) != 1:
            raise ValueError(f"StackDataset: size mismatch between datasets: {sorted(lengths)}")
        self._length = lengths.pop()

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._length
