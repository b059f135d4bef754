"""What workers send back is what loading in the process gives: 0-d tensors stay 0-d (samples
without auto-batching, a collate_fn that reduces a batch to a scalar)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, Dataset

pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


class Scalars(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return tj.tensor(i * 1.5), tj.tensor(i % 2 == 0), np.float32(i), tj.tensor([i])


def _total(batch):
    return tj.stack([s[0] for s in batch]).sum()


def _shapes(loader):
    return [[(tuple(t.shape), t.dtype, t.tolist()) for t in (b if isinstance(b, (list, tuple)) else [b])]
            for b in loader]


@pytest.mark.parametrize("kw", [{"batch_size": None}, {"batch_size": 2, "collate_fn": _total}])
def test_zero_dim_results_keep_their_shape(kw):
    ref = _shapes(DataLoader(Scalars(), **kw))
    assert ref[0][0][0] == ()
    assert _shapes(DataLoader(Scalars(), num_workers=2, **kw)) == ref
