"""``DataLoader`` and ``default_collate``, as in ``torch.utils.data.dataloader``.

With ``num_workers=0`` loading happens in the calling process; with ``num_workers > 0``
worker processes load and collate the batches the parent's sampler chose, so the
batches and their order are those of ``num_workers=0`` (see `_workers`). Shuffling draws from ``generator=`` when given, else from
tracejit's global generator, so ``tracejit.manual_seed`` makes the order reproducible. A `TensorDataset` with the default collate is batched
by indexing each tensor once with the batch's indices instead of stacking rows one
by one; the result is the same.
"""
from __future__ import annotations

import collections.abc
import hashlib
import itertools
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from ... import dtypes as _dt
from ...tensor import Tensor
from ._workers import LoadError, get_worker_info
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler, num_batches

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]


# ---------------------------------------------------------------- collation
def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def default_collate(batch: list) -> Any:
    """Stack a list of samples into a batch, recursing into tuples, lists and dicts.

    Tensors and numpy arrays are stacked along a new first dim, Python floats become a
    float64 tensor and ints (bools) a tensor of the dtype the batch infers, strings stay the
    sequence they came in; a tuple or list sample gives a list of collated fields and a
    dict sample a dict, as in PyTorch.
    """
    from ...ops import stack, tensor
    if not isinstance(batch, (list, tuple)) or not batch:
        raise ValueError("default_collate: expected a non-empty list of samples")
    elem = batch[0]
    if isinstance(elem, Tensor):
        shapes = {tuple(b.shape) for b in batch if isinstance(b, Tensor)}
        if len(shapes) > 1 or any(not isinstance(b, Tensor) for b in batch):
            raise RuntimeError(f"default_collate: stack expects each sample to be a tensor of equal "
                               f"size, got shapes {sorted(shapes)}")
        if not any(b.requires_grad for b in batch) and len({(b.dtype, b.device) for b in batch}) == 1:
            # samples carry no graph: one array stack, the values and row-major layout `stack`
            # gives (PyTorch's collate is one C++ stack; per-sample unsqueeze ops cost ~10 us
            # each here). An array stack follows transposed or channels_last samples' layout.
            xp = elem._xp()
            return Tensor._wrap(xp.ascontiguousarray(xp.stack([b._data for b in batch])), elem.dtype, elem.device)
        return stack(batch)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "OUS":
            raise TypeError(f"default_collate: numpy arrays of dtype {elem.dtype} can't be batched")
        return default_collate([tensor(b) for b in batch])
    if isinstance(elem, (np.bool_, np.number)):
        return tensor(np.array(batch))
    if isinstance(elem, float):
        return tensor(batch, dtype=_dt.float64)
    if isinstance(elem, int):   # (bools too: the dtype is inferred from the whole batch, as
        return tensor(batch)    # PyTorch's, so [1, 2.5] stays [1.0, 2.5])
    if isinstance(elem, (str, bytes)):
        return batch      # as given: a field of tuple samples stays a tuple, as in PyTorch
    if isinstance(elem, collections.abc.Mapping):
        out = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            return type(elem)(out)
        except TypeError:
            return out
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        n = len(elem)
        if any(len(b) != n for b in batch):
            raise RuntimeError("default_collate: each element in list of batch should be of equal size")
        return [default_collate(s) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                    f"lists; found {type(elem).__name__}")


def default_convert(data: Any) -> Any:
    """For unbatched loading (batch_size=None): numpy arrays become tensors, recursively."""
    from ...ops import as_tensor
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OUS" or isinstance(data, (np.bool_, np.number)):
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        out = {k: default_convert(v) for k, v in data.items()}
        try:
            return type(data)(out)   # (an OrderedDict stays one, as in PyTorch)
        except TypeError:
            return out
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (tuple, list)):
        return [default_convert(d) for d in data]
    return data


# ---------------------------------------------------------------- loader
class DataLoader:
    """Iterate over a dataset in (optionally shuffled) batches."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, **ignored):
        unknown = set(ignored) - {"timeout", "worker_init_fn", "generator", "prefetch_factor",
                                  "persistent_workers", "multiprocessing_context", "pin_memory_device",
                                  "in_order"}
        if unknown:
            raise TypeError(f"DataLoader got unexpected keyword arguments {sorted(unknown)}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be a non-negative int, got {num_workers!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size <= 0):
            raise ValueError(f"DataLoader: batch_size should be a positive integer or None, got {batch_size!r}")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}")
        iterable = isinstance(dataset, IterableDataset)
        if not iterable and not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"DataLoader: dataset must support len() and indexing (or be an "
                            f"IterableDataset), got {type(dataset).__name__}")
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: shuffle, sampler and batch_sampler must "
                             "not be given (the dataset decides the order)")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None option disables auto-batching and is "
                             "mutually exclusive with drop_last")
        if num_workers == 0 and ignored.get("persistent_workers"):
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
        if num_workers == 0 and ignored.get("prefetch_factor") is not None:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in multiprocessing: "
                             "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None")
        prefetch = ignored.get("prefetch_factor")
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1):
            # (PyTorch refuses a negative one here and 0 at iter(); 0 would load nothing)
            raise ValueError(f"DataLoader: prefetch_factor option should be a positive int, got {prefetch!r}")
        if not isinstance(ignored.get("timeout", 0), (int, float)) or ignored.get("timeout", 0) < 0:
            raise ValueError(f"DataLoader: timeout option should be non-negative, got {ignored['timeout']!r}")
        init_fn = ignored.get("worker_init_fn")
        if init_fn is not None and not callable(init_fn):
            raise TypeError(f"DataLoader: worker_init_fn must be callable, got {type(init_fn).__name__}")
        self.worker_init_fn = init_fn
        self.persistent_workers = bool(ignored.get("persistent_workers", False))
        self.multiprocessing_context = _check_context(ignored.get("multiprocessing_context"), num_workers)
        # (None without workers, as PyTorch's)
        self.prefetch_factor = prefetch if prefetch is not None or num_workers == 0 else 2
        self.pin_memory_device = ignored.get("pin_memory_device", "")
        self.in_order = ignored.get("in_order", True)   # (batches always come in order here)
        self.generator = ignored.get("generator")
        self.timeout = ignored.get("timeout", 0)
        self._pool = None
        self._stream_len = None   # len(loader) of an IterableDataset, once asked (see _LoaderIter)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self._iterable = iterable
        if not iterable:
            if sampler is None:
                sampler = (RandomSampler(dataset, generator=self.generator) if shuffle
                           else SequentialSampler(dataset))
            if batch_size is not None and batch_sampler is None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._auto_collation = batch_sampler is not None or (iterable and batch_size is not None)
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if self._auto_collation else default_convert)
        self._fast = collate_fn is None and self._auto_collation and _tensor_rows(dataset) is not None

    def __iter__(self) -> "_LoaderIter":
        return _LoaderIter(self)

    def _base_seed(self) -> int:
        """The seed of one pass's workers (worker i seeds with it + i), new at every ``iter()``:
        derived from ``generator``'s state (else the global generator's) and this loader's
        count of passes, not drawn from it. Each epoch's workers draw fresh random numbers, a
        fixed seed reproduces them, and nothing is drawn, so the shuffle order stays that of
        ``num_workers=0`` and a run resumed from a checkpoint's random state goes on as the
        uninterrupted run (PyTorch draws an int64 here, which moves the stream)."""
        from ...ops.random import get_rng_state
        state = self.generator.get_state() if self.generator is not None else get_rng_state()
        self._passes = getattr(self, "_passes", 0) + 1
        digest = hashlib.sha256(state.numpy().tobytes() + self._passes.to_bytes(8, "little")).digest()
        return int.from_bytes(digest[:7], "little")

    def _batches(self, base_seed: int) -> Iterator:
        if self.num_workers > 0:
            yield from self._iter_workers(base_seed)
            return
        if self._iterable:
            yield from self._iter_stream()
            return
        fetch = self._map_fetcher()
        for indices in self.batch_sampler if self.batch_sampler is not None else self.sampler:
            try:
                out = fetch(indices)
            except Exception as e:   # raised by the iterator, which goes on with the next batch
                out = LoadError(e)
            yield out

    def _map_fetcher(self) -> "_MapFetcher":
        batched = self.batch_sampler is not None
        return _MapFetcher(self.dataset, self.collate_fn, batched, self._fast)

    def _iter_workers(self, base_seed: int):
        from ._workers import WorkerPool
        pool = self._pool
        if pool is None or not pool.alive:
            spec = {"dataset": self.dataset, "iterable": self._iterable, "worker_init_fn": self.worker_init_fn,
                    "fetch": _StreamFetcher(self.batch_size, self.drop_last, self.collate_fn) if self._iterable
                    else self._map_fetcher()}
            pool = WorkerPool(spec, self.num_workers, base_seed, self.multiprocessing_context,
                              self.prefetch_factor, self.timeout)
            if self.persistent_workers:
                self._pool = pool
        try:
            if self._iterable:
                yield from pool.run_stream()
            else:
                yield from pool.run_indices(self.batch_sampler if self.batch_sampler is not None
                                            else self.sampler)
        finally:
            if not self.persistent_workers:
                pool.close()   # also when the caller stops early (the generator is closed)

    def _iter_stream(self):
        """The batches of an IterableDataset loaded here: the workers' fetcher, so a batch whose
        loading raises is raised by the iterator, which then goes on with the stream, as there."""
        fetch, stream = _StreamFetcher(self.batch_size, self.drop_last, self.collate_fn), iter(self.dataset)
        while True:
            try:
                out = fetch(stream)
            except StopIteration:
                return
            except Exception as e:
                out = LoadError(e)
            yield out

    def __len__(self) -> int:
        if self._iterable:
            # (TypeError if the stream has no length, as in PyTorch; the iterator warns past the
            # dataset's length, counted in batches as PyTorch's does)
            n = self._stream_len = len(self.dataset)
            return n if self.batch_size is None else num_batches(n, self.batch_size, self.drop_last)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)


class _LoaderIter:
    """What ``iter(loader)`` gives, as PyTorch's: an iterator that also knows the loader's
    length (``len(iter(loader))``, progress bars given the iterator)."""

    def __init__(self, loader: DataLoader):
        self._loader, self._gen = loader, loader._batches(loader._base_seed())
        self._num_yielded = 0
        self._stream_len = loader._stream_len

    def __iter__(self) -> "_LoaderIter":
        return self

    def __next__(self):
        out = next(self._gen)
        self._num_yielded += 1
        if self._stream_len is not None and self._num_yielded > self._stream_len:
            # more than the length the program was told: as PyTorch, say so (with workers,
            # usually each worker yielding the whole stream)
            more = (" With workers, each worker's copy of the dataset may be yielding all of it: "
                    "split the stream by get_worker_info() in __iter__ or in worker_init_fn."
                    if self._loader.num_workers > 0 else "")
            warnings.warn(f"Length of IterableDataset {self._loader.dataset} was reported to be "
                          f"{self._stream_len} (when accessing len(dataloader)), but {self._num_yielded} "
                          f"samples have been fetched.{more}", stacklevel=2)
        if isinstance(out, LoadError):
            out.reraise()
        return out

    def __len__(self) -> int:
        return len(self._loader)


class _MapFetcher:
    """Loads one batch (or one sample without auto-batching) in a worker: picklable for spawn."""

    def __init__(self, dataset, collate_fn, batched: bool, fast: bool):
        self.dataset, self.collate_fn, self.batched, self.fast = dataset, collate_fn, batched, fast

    def __call__(self, indices):
        if not self.batched:
            return self.collate_fn(self.dataset[indices])
        if self.fast:
            return _gather_rows(self.dataset, indices)
        getitems = getattr(self.dataset, "__getitems__", None)   # (a dataset that reads a batch at once)
        return self.collate_fn(getitems(list(indices)) if callable(getitems) else [self.dataset[i] for i in indices])


class _StreamFetcher:
    """Takes the next batch from a worker's copy of an IterableDataset (StopIteration at the end)."""

    def __init__(self, batch_size, drop_last: bool, collate_fn):
        self.batch_size, self.drop_last, self.collate_fn = batch_size, drop_last, collate_fn

    def __call__(self, stream):
        if self.batch_size is None:
            return self.collate_fn(next(stream))
        batch = list(itertools.islice(stream, self.batch_size))
        if not batch or (self.drop_last and len(batch) < self.batch_size):
            raise StopIteration
        return self.collate_fn(batch)


def _check_context(ctx, num_workers: int):
    """`multiprocessing_context` as given, refused at once where PyTorch's DataLoader refuses it
    (an unknown start method, a wrong type, no workers to start)."""
    import multiprocessing as mp
    if ctx is None:
        return None
    if num_workers == 0:
        raise ValueError(f"DataLoader: multiprocessing_context can only be used with multi-process "
                         f"loading (num_workers > 0), but got num_workers={num_workers}")
    if isinstance(ctx, str):
        if ctx not in mp.get_all_start_methods():
            raise ValueError(f"DataLoader: multiprocessing_context option should specify a valid start "
                             f"method in {mp.get_all_start_methods()!r}, but got multiprocessing_context={ctx!r}")
    elif not isinstance(ctx, mp.context.BaseContext):
        raise TypeError(f"DataLoader: multiprocessing_context option should be a valid context object or a "
                        f"string specifying the start method, but got multiprocessing_context={ctx!r}")
    return ctx


def _tensor_rows(dataset):
    """The TensorDataset under `dataset` (itself or under Subsets, as random_split makes),
    or None: its batches are one gather per tensor, equal to collating its samples."""
    while type(dataset) is Subset:
        dataset = dataset.dataset
    return dataset if type(dataset) is TensorDataset else None


def _gather_rows(dataset, indices) -> list:
    while type(dataset) is Subset:
        indices = [dataset.indices[i] for i in indices]
        dataset = dataset.dataset
    return [t[_index_tensor(indices, t.device)] for t in dataset.tensors]


def _index_tensor(indices: list, device) -> Tensor:
    from ...ops import tensor
    return tensor(indices, dtype=_dt.int64, device=device)


class _DatasetKind:
    """PyTorch's private dataset kinds and their fetchers (a batch of indices -> a batch),
    for programs and libraries that build their own loading loop on them."""
    Map = 0
    Iterable = 1

    @staticmethod
    def create_fetcher(kind: int, dataset, auto_collation: bool, collate_fn: Callable, drop_last: bool):
        if kind == _DatasetKind.Map:
            return _KindMapFetcher(dataset, auto_collation, collate_fn)
        return _KindIterableFetcher(dataset, auto_collation, collate_fn, drop_last)


class _KindMapFetcher:
    def __init__(self, dataset, auto_collation: bool, collate_fn: Callable):
        self.dataset, self.auto_collation, self.collate_fn = dataset, auto_collation, collate_fn

    def fetch(self, possibly_batched_index):
        fetch = _MapFetcher(self.dataset, self.collate_fn, self.auto_collation, False)
        return fetch(possibly_batched_index)


class _KindIterableFetcher:
    def __init__(self, dataset, auto_collation: bool, collate_fn: Callable, drop_last: bool):
        self.it, self.auto_collation, self.collate_fn, self.drop_last = iter(dataset), auto_collation, collate_fn, drop_last

    def fetch(self, possibly_batched_index):
        size = len(possibly_batched_index) if self.auto_collation else None
        return _StreamFetcher(size, self.drop_last, self.collate_fn)(self.it)
