"""The built-in iterable pipes, each registered under its functional name: ``map``,
``filter``, ``batch``, ``unbatch``, ``collate``, ``shuffle``, ``concat``, ``zip``,
``enumerate``... and `IterableWrapper`, the pipe over any iterable."""
from __future__ import annotations

import random
from typing import Callable, Optional

from ..sampler import batches, num_batches
from .datapipe import DataChunk, IterDataPipe, copy_if, functional_datapipe

__all__ = ["IterableWrapper", "Mapper", "Filter", "Batcher", "UnBatcher", "Collator", "Shuffler",
           "Concater", "Zipper", "Enumerator", "Header", "ShardingFilter"]


def _apply(fn: Callable, data, input_col, output_col):
    """``fn`` on `data`, or on its `input_col` field(s), written to `output_col` (PyTorch's
    Mapper/Filter column rules for tuples, lists and dicts)."""
    if input_col is None:
        return fn(data)
    cols = input_col if isinstance(input_col, (list, tuple)) else [input_col]
    res = fn(*(data[c] for c in cols))
    if output_col is None and isinstance(input_col, (list, tuple)) and len(cols) > 1:
        raise ValueError("map: output_col must be given when input_col names several fields")
    out = output_col if output_col is not None else cols[0]
    data = list(data) if isinstance(data, tuple) else (data.copy() if hasattr(data, "copy") else data)
    if out == -1 and isinstance(data, list):
        data.append(res)
    else:
        data[out] = res
    return data


class IterableWrapper(IterDataPipe):
    """The items of `iterable` (deep-copied per iteration when `deepcopy`)."""

    def __init__(self, iterable, deepcopy: bool = True):
        self.iterable, self.deepcopy = iterable, deepcopy

    def __iter__(self):
        yield from copy_if(self.iterable, self.deepcopy)

    def __len__(self) -> int:
        return len(self.iterable)


@functional_datapipe("map")
class Mapper(IterDataPipe):
    def __init__(self, datapipe, fn: Callable, input_col=None, output_col=None):
        self.datapipe, self.fn, self.input_col, self.output_col = datapipe, fn, input_col, output_col

    def __iter__(self):
        for d in self.datapipe:
            out = _apply(self.fn, d, self.input_col, self.output_col)
            yield tuple(out) if isinstance(d, tuple) and isinstance(out, list) else out

    def __len__(self) -> int:
        return len(self.datapipe)


@functional_datapipe("filter")
class Filter(IterDataPipe):
    def __init__(self, datapipe, filter_fn: Callable, input_col=None):
        self.datapipe, self.filter_fn, self.input_col = datapipe, filter_fn, input_col

    def __iter__(self):
        for d in self.datapipe:
            keep = self.filter_fn(d) if self.input_col is None else self.filter_fn(d[self.input_col])
            if not isinstance(keep, bool):
                raise ValueError(f"Boolean output is required for `filter_fn` of Filter, got {type(keep)}")
            if keep:
                yield d


@functional_datapipe("batch")
class Batcher(IterDataPipe):
    def __init__(self, datapipe, batch_size: int, drop_last: bool = False, wrapper_class=DataChunk):
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe, self.batch_size, self.drop_last, self.wrapper_class = datapipe, batch_size, drop_last, wrapper_class

    def __iter__(self):
        return map(self.wrapper_class, batches(self.datapipe, self.batch_size, self.drop_last))

    def __len__(self) -> int:
        return num_batches(len(self.datapipe), self.batch_size, self.drop_last)


@functional_datapipe("unbatch")
class UnBatcher(IterDataPipe):
    def __init__(self, datapipe, unbatch_level: int = 1):
        self.datapipe, self.unbatch_level = datapipe, unbatch_level

    def _dive(self, x, level):
        if level == 0:
            yield x
        else:
            for e in x:
                yield from self._dive(e, level - 1)

    def __iter__(self):
        for d in self.datapipe:
            yield from self._dive(d, self.unbatch_level)


@functional_datapipe("collate")
class Collator(Mapper):
    def __init__(self, datapipe, conversion=None, collate_fn: Optional[Callable] = None):
        from ..dataloader import default_collate
        super().__init__(datapipe, collate_fn or conversion or default_collate)


@functional_datapipe("shuffle")
class Shuffler(IterDataPipe):
    """The items in random order, drawn from a buffer of `buffer_size` (tracejit's global
    generator seeds each iteration, so ``manual_seed`` repeats it; ``set_seed`` fixes it)."""

    def __init__(self, datapipe, *, buffer_size: int = 10000, unbatch_level: int = 0):
        if buffer_size <= 0:
            raise AssertionError("buffer_size should be larger than 0")
        self.datapipe = datapipe if unbatch_level == 0 else UnBatcher(datapipe, unbatch_level)
        self.buffer_size, self._enabled, self._seed = buffer_size, True, None

    def set_shuffle(self, shuffle: bool = True):
        self._enabled = shuffle
        return self

    def set_seed(self, seed: int):
        self._seed = seed
        return self

    def __iter__(self):
        if not self._enabled:
            yield from self.datapipe
            return
        from .... import randint
        seed = self._seed if self._seed is not None else int(randint(0, 2 ** 62, ()).item())
        rng, buf = random.Random(seed), []
        for d in self.datapipe:
            if len(buf) == self.buffer_size:
                i = rng.randrange(len(buf))
                buf[i], d = d, buf[i]
                yield d
            else:
                buf.append(d)
        rng.shuffle(buf)
        yield from buf

    def __len__(self) -> int:
        return len(self.datapipe)


@functional_datapipe("concat")
class Concater(IterDataPipe):
    def __init__(self, *datapipes):
        if not datapipes:
            raise ValueError("Expected at least one DataPipe, but got nothing")
        self.datapipes = datapipes

    def __iter__(self):
        for dp in self.datapipes:
            yield from dp

    def __len__(self) -> int:
        return sum(len(dp) for dp in self.datapipes)


@functional_datapipe("zip")
class Zipper(IterDataPipe):
    def __init__(self, *datapipes):
        self.datapipes = datapipes

    def __iter__(self):
        yield from zip(*self.datapipes)

    def __len__(self) -> int:
        return min(len(dp) for dp in self.datapipes)


@functional_datapipe("enumerate")
class Enumerator(IterDataPipe):
    def __init__(self, datapipe, starting_index: int = 0):
        self.datapipe, self.starting_index = datapipe, starting_index

    def __iter__(self):
        yield from enumerate(self.datapipe, self.starting_index)


@functional_datapipe("header")
class Header(IterDataPipe):
    def __init__(self, datapipe, limit: int = 10):
        self.datapipe, self.limit = datapipe, limit

    def __iter__(self):
        for i, d in enumerate(self.datapipe):
            if i >= self.limit:
                return
            yield d


@functional_datapipe("sharding_filter")
class ShardingFilter(IterDataPipe):
    """Every `num_of_instances`-th item from `instance_id` on (all of them until
    ``apply_sharding`` is called)."""

    def __init__(self, source_datapipe, sharding_group_filter=None):
        self.source_datapipe, self.num_of_instances, self.instance_id = source_datapipe, 1, 0

    def apply_sharding(self, num_of_instances: int, instance_id: int, sharding_group=None) -> None:
        self.num_of_instances, self.instance_id = num_of_instances, instance_id

    def __iter__(self):
        for i, d in enumerate(self.source_datapipe):
            if i % self.num_of_instances == self.instance_id:
                yield d
