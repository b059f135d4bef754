"""DataLoader(num_workers > 0): same batches and order as num_workers=0, seeding, errors, shutdown."""
import gc
import multiprocessing as mp
import os
import time

import numpy as np
import pytest

import tracejit as tj
from tracejit.utils.data import (DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info,
                                 random_split)


class Squares(Dataset):
    """(a tensor, a Python int, a dict) per index; module level, so spawned workers can unpickle it."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        return tj.tensor([float(i), float(i * i)]), i, {"neg": tj.tensor(-i)}


class WhoLoads(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = get_worker_info()
        return tj.tensor([i, info.id, os.getpid(), int(np.random.randint(0, 1 << 30))])


class Fails(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("item 5 is broken")
        return tj.tensor(float(i))


class Stream(IterableDataset):
    """Each worker yields its share (i % num_workers == id) of range(n)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        return iter([tj.tensor(float(i)) for i in range(self.n) if i % nw == wid])


def _flat(batch):
    """A comparable form of a collated batch."""
    if isinstance(batch, tj.Tensor):
        return ("T", batch.dtype.name, batch.numpy().tolist())
    if isinstance(batch, dict):
        return {k: _flat(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_flat(b) for b in batch]
    return batch


def _epochs(loader, n=2):
    return [[_flat(b) for b in loader] for _ in range(n)]


def _init(worker_id):
    np.random.seed(1000 + worker_id)


def test_same_batches_and_order_as_single_process():
    ds = Squares()
    tj.manual_seed(7)
    ref = _epochs(DataLoader(ds, batch_size=4, shuffle=True))
    tj.manual_seed(7)
    got = _epochs(DataLoader(ds, batch_size=4, shuffle=True, num_workers=2))
    assert got == ref and ref[0] != ref[1]                   # two different shuffles, both reproduced
    # TensorDataset's fast path, drop_last, persistent workers reused across epochs.
    x = tj.arange(30).reshape(10, 3)
    td = TensorDataset(x, tj.arange(10))
    tj.manual_seed(3)
    ref = _epochs(DataLoader(td, batch_size=3, shuffle=True, drop_last=True))
    tj.manual_seed(3)
    loader = DataLoader(td, batch_size=3, shuffle=True, drop_last=True, num_workers=3, persistent_workers=True)
    got = _epochs(loader)
    assert got == ref and len(got[0]) == 3
    pids = [w.pid for w in loader._pool.workers]
    assert all(w.is_alive() for w in loader._pool.workers)
    _epochs(loader, 1)
    assert [w.pid for w in loader._pool.workers] == pids     # persistent: the same processes
    workers = loader._pool.workers
    del loader
    gc.collect()
    _wait_dead(workers)


def _wait_dead(workers, limit=10.0):
    end = time.monotonic() + limit
    while any(w.is_alive() for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(w.is_alive() for w in workers)


def test_worker_assignment_seeds_and_init_fn():
    loader = DataLoader(WhoLoads(), batch_size=2, num_workers=2, worker_init_fn=_init)
    batches = [b.numpy() for b in loader]
    assert [int(b[0, 1]) for b in batches] == [k % 2 for k in range(6)]   # batch k on worker k % 2
    np.testing.assert_array_equal(np.concatenate([b[:, 0] for b in batches]), np.arange(12))
    # worker_init_fn ran in each worker: its numpy stream is the one seeded there.
    first = {int(b[0, 1]): int(b[0, 3]) for b in batches[:2]}
    for wid, val in first.items():
        np.random.seed(1000 + wid)
        assert val == np.random.randint(0, 1 << 30)
    assert get_worker_info() is None                                  # main process


def test_worker_error_names_worker_and_shuts_down():
    loader = DataLoader(Fails(), batch_size=2, num_workers=2)
    it = iter(loader)
    assert _flat(next(it)) == ("T", "float32", [0.0, 1.0])
    started = set(mp.active_children())
    with pytest.raises(RuntimeError, match=r"(?s)Caught ValueError in DataLoader worker process 0.*item 5 is broken"):
        list(it)
    _wait_dead(started)


def test_early_break_leaves_no_workers():
    before = set(mp.active_children())
    loader = DataLoader(Squares(), batch_size=2, num_workers=2)
    for _ in loader:
        started = set(mp.active_children()) - before
        assert len(started) == 2
        break   # the loop drops the iterator; closing the generator stops the workers
    gc.collect()
    _wait_dead(started)


def test_iterable_dataset_with_workers():
    ref = [b.numpy().tolist() for b in DataLoader(Stream(11), batch_size=2)]
    got = [b.numpy().tolist() for b in DataLoader(Stream(11), batch_size=2, num_workers=2)]
    # Worker copies interleave batch by batch (as PyTorch): w0 [0, 2], w1 [1, 3], w0 [4, 6], ...
    assert got[:2] == [[0.0, 2.0], [1.0, 3.0]]
    assert sorted(x for b in got for x in b) == sorted(x for b in ref for x in b)


def test_persistent_workers_need_workers():
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(Squares(), num_workers=0, persistent_workers=True)


def test_random_split():
    ds = TensorDataset(tj.arange(10))
    tj.manual_seed(0)
    a, b, c = random_split(ds, [0.5, 0.3, 0.2])
    assert (len(a), len(b), len(c)) == (5, 3, 2)
    items = sorted(int(s[i][0].item()) for s in (a, b, c) for i in range(len(s)))
    assert items == list(range(10))
    tj.manual_seed(0)
    a2, _, _ = random_split(ds, [5, 3, 2])
    assert a2.indices == a.indices
    with pytest.raises(ValueError, match="summing to the dataset length 10"):
        random_split(ds, [5, 6])
