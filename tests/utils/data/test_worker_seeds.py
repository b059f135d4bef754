"""DataLoader workers' seeds, as PyTorch's: drawn from the loader's generator at every
``iter()``, so each epoch's workers draw fresh numbers, a fixed generator seed reproduces
them, and the shuffle order stays that of ``num_workers=0``."""
import random

import numpy as np
import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, Dataset, get_worker_info

pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


class Draws(Dataset):
    """Per index: the loading worker's id, seed check and one draw from each generator."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = get_worker_info()
        return (i, info.id, info.seed == tj.initial_seed(), random.random(), float(np.random.rand()),
                float(tj.rand(())))


def _epochs(seed, n=2, **kw):
    loader = DataLoader(Draws(), batch_size=None, generator=tj.Generator().manual_seed(seed), **kw)
    return [list(loader) for _ in range(n)]


def test_each_epoch_draws_fresh_worker_seeds_reproducibly():
    e1, e2 = _epochs(5, num_workers=2)
    assert all(s[2] for s in e1 + e2)                       # initial_seed() is the worker's seed
    assert [s[:2] for s in e1] == [[i, i % 2] for i in range(6)]
    assert e1[0][3:] != e1[1][3:]                           # the two workers' streams differ
    assert e1 != e2                                         # and so do two epochs'
    assert _epochs(5, num_workers=2) == [e1, e2]            # the same generator seed: the same draws
    assert _epochs(6, num_workers=2) != [e1, e2]


def test_shuffle_order_with_workers_is_that_without():
    def order(nw):
        g = tj.Generator().manual_seed(3)
        loader = DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=g, num_workers=nw)
        return [[b.tolist() for b in loader] for _ in range(2)]
    ref = order(0)
    assert ref[0] != ref[1] and order(1) == ref and order(2) == ref
