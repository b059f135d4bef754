"""Samplers, as in ``torch.utils.data.sampler``: which dataset indices a DataLoader loads,
in which order, and how they are grouped into batches. Random orders draw from tracejit's
global generator (``tracejit.manual_seed`` makes them reproducible)."""
from __future__ import annotations

import itertools
from typing import Iterator, Sequence

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]


def batches(items, batch_size: int, drop_last: bool) -> Iterator[list]:
    """Lists of `batch_size` consecutive items of `items`, the last one shorter unless
    `drop_last` drops it."""
    it = iter(items)
    while batch := list(itertools.islice(it, batch_size)):
        if len(batch) == batch_size or not drop_last:
            yield batch


def num_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """How many batches `batches` makes of `n` items."""
    return n // batch_size if drop_last else -(-n // batch_size)


class Sampler:
    """Yields dataset indices."""

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise TypeError(f"{type(self).__name__} has no length")


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A fresh permutation on every pass, from `generator` or tracejit's global generator."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None):
        self.data_source = data_source
        self.generator = generator
        self.replacement = replacement
        self._num_samples = num_samples
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples should be a positive int, got {num_samples!r}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        from ...ops.random import randint, randperm
        n = len(self.data_source)
        g = self.generator
        if self.replacement:
            yield from randint(0, n, (self.num_samples,), generator=g).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from randperm(n, generator=g).tolist()
        yield from randperm(n, generator=g).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """`indices` in a fresh random order on every pass, from `generator` or the global one."""

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices = list(indices)
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        from ...ops.random import randperm
        order = randperm(len(self.indices), generator=self.generator).tolist()
        return iter([self.indices[i] for i in order])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of `batch_size`."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer, got {batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean, got {drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        return batches(self.sampler, self.batch_size, self.drop_last)

    def __len__(self) -> int:
        return num_batches(len(self.sampler), self.batch_size, self.drop_last)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator=None):
        import numpy as np
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"WeightedRandomSampler: num_samples should be a positive integer, got "
                             f"{num_samples!r}")
        if not isinstance(replacement, bool):
            raise ValueError(f"WeightedRandomSampler: replacement should be a boolean, got {replacement!r}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else list(weights), dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"WeightedRandomSampler: weights should be a 1-D sequence, got shape {w.shape}")
        self.weights, self.num_samples, self.replacement = w, num_samples, replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        from ...ops.creation import tensor
        from ...ops.tensorfns import multinomial
        return iter(multinomial(tensor(self.weights), self.num_samples, self.replacement,
                                generator=self.generator).tolist())

    def __len__(self) -> int:
        return self.num_samples
