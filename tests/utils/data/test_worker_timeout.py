"""``DataLoader(timeout=...)`` with workers, as PyTorch's: a batch that takes longer than
``timeout`` seconds to arrive raises RuntimeError instead of waiting for ever."""
import time

import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, Dataset

pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


class Slow(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(1.5)   # far beyond the loader's timeout
        return tj.tensor(float(i))


def test_a_late_batch_times_out():
    loader = DataLoader(Slow(), batch_size=1, num_workers=1, prefetch_factor=1, timeout=0.1)
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.1 seconds"):
        next(iter(loader))


def test_timeout_must_be_a_non_negative_number():
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(Slow(), num_workers=1, timeout=-1)
