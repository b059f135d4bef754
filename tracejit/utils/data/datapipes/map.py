"""The built-in map-style pipes under their functional names (``map``, ``batch``,
``concat``, ``zip``, ``shuffle``) and `SequenceWrapper`, the pipe over a sequence."""
from __future__ import annotations

from typing import Callable

from ..sampler import num_batches
from .datapipe import DataChunk, MapDataPipe, copy_if, functional_datapipe

__all__ = ["SequenceWrapper", "Mapper", "Batcher", "Concater", "Zipper"]


class SequenceWrapper(MapDataPipe):
    def __init__(self, sequence, deepcopy: bool = True):
        self.sequence = copy_if(sequence, deepcopy)

    def __getitem__(self, index):
        return self.sequence[index]

    def __len__(self) -> int:
        return len(self.sequence)


@functional_datapipe("map")
class Mapper(MapDataPipe):
    def __init__(self, datapipe, fn: Callable = lambda x: x):
        self.datapipe, self.fn = datapipe, fn

    def __getitem__(self, index):
        return self.fn(self.datapipe[index])

    def __len__(self) -> int:
        return len(self.datapipe)


@functional_datapipe("batch")
class Batcher(MapDataPipe):
    def __init__(self, datapipe, batch_size: int, drop_last: bool = False, wrapper_class=DataChunk):
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe, self.batch_size, self.drop_last, self.wrapper_class = datapipe, batch_size, drop_last, wrapper_class

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"Index {index} is out of bound.")
        start = index * self.batch_size
        return self.wrapper_class([self.datapipe[i] for i in range(start, min(start + self.batch_size,
                                                                               len(self.datapipe)))])

    def __len__(self) -> int:
        return num_batches(len(self.datapipe), self.batch_size, self.drop_last)


@functional_datapipe("concat")
class Concater(MapDataPipe):
    def __init__(self, *datapipes):
        if not datapipes:
            raise ValueError("Expected at least one DataPipe, but got nothing")
        self.datapipes = datapipes

    def __getitem__(self, index):
        for dp in self.datapipes:
            if index < len(dp):
                return dp[index]
            index -= len(dp)
        raise IndexError(f"Index {index} is out of range.")

    def __len__(self) -> int:
        return sum(len(dp) for dp in self.datapipes)


@functional_datapipe("zip")
class Zipper(MapDataPipe):
    def __init__(self, *datapipes):
        self.datapipes = datapipes

    def __getitem__(self, index):
        return tuple(dp[index] for dp in self.datapipes)

    def __len__(self) -> int:
        return min(len(dp) for dp in self.datapipes)


def _shuffle(datapipe, *, indices=None):
    """``MapDataPipe.shuffle``: an iterable pipe of the items in random order."""
    from .iter import IterableWrapper, Mapper as IterMapper, Shuffler
    idx = list(range(len(datapipe))) if indices is None else list(indices)
    return IterMapper(Shuffler(IterableWrapper(idx), buffer_size=max(len(idx), 1)), datapipe.__getitem__)


MapDataPipe.register_function("shuffle", _shuffle)
