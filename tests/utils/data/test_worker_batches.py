"""What workers send back is what loading in the process gives: 0-d tensors stay 0-d (samples
without auto-batching, a collate_fn that reduces a batch to a scalar), and transposed or
channels_last results keep their strides."""
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


class Layouts(Dataset):
    """A transposed matrix and a channels_last image per index."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        img = (tj.arange(24.0).reshape(1, 2, 3, 4) + i).to(memory_format=tj.channels_last)[0]
        return tj.arange(6.0).reshape(2, 3).t() + i, img


def _channels_last_batch(batch):
    return tj.stack([s[1] for s in batch]).contiguous(memory_format=tj.channels_last)


def _layouts(loader):
    return [[(t.stride(), t.tolist()) for t in (b if isinstance(b, (list, tuple)) else [b])] for b in loader]


@pytest.mark.parametrize("kw", [{"batch_size": None}, {"batch_size": 2, "collate_fn": _channels_last_batch}])
def test_results_keep_their_layout(kw):
    # (as PyTorch's workers keep strides: a collate_fn making channels_last batches gets them)
    ref = _layouts(DataLoader(Layouts(), **kw))
    assert ref[0][0][0] in ((1, 3), (24, 1, 8, 2))
    assert _layouts(DataLoader(Layouts(), num_workers=2, **kw)) == ref
