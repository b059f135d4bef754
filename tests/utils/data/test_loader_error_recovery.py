"""After a batch's loading raises, the DataLoader's iterator goes on with the next batch, as
PyTorch's: a loop that catches a dataset's error and continues sees every other batch, with
workers or without."""
import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, Dataset, IterableDataset


class Broken(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i in (2, 5):
            raise ValueError(f"item {i} is broken")
        return tj.tensor(i)


def _skip_errors(loader):
    got, it = [], iter(loader)
    while True:
        try:
            out = next(it)
            got.append(out.tolist() if isinstance(out, tj.Tensor) else out)
        except StopIteration:
            return got
        except ValueError as e:
            assert "is broken" in str(e)
            got.append("error")


@pytest.mark.parametrize("kw", [{}, {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}])
def test_the_epoch_goes_on_after_a_failing_batch(kw):
    if kw and "fork" not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("needs the fork start method")
    loader = DataLoader(Broken(), batch_size=1, **kw)
    expect = [[0], [1], "error", [3], [4], "error", [6], [7]]
    assert _skip_errors(loader) == expect
    assert _skip_errors(loader) == expect          # and the next epoch is whole again


class _SkipsThree:
    """An iterator that raises at its third item and then goes on (a reader that can resume)."""

    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        if self.i == 3:
            raise ValueError("record 3 is broken")
        if self.i > 6:
            raise StopIteration
        return self.i


class Records(IterableDataset):
    def __iter__(self):
        return _SkipsThree()


@pytest.mark.parametrize("batch_size,expect", [(None, [1, 2, "error", 4, 5, 6]), (2, [[1, 2], "error", [4, 5], [6]])])
def test_a_stream_goes_on_after_a_failing_record(batch_size, expect):
    # (PyTorch's results: the failing record's batch is lost, the next record starts a new one)
    assert _skip_errors(DataLoader(Records(), batch_size=batch_size)) == expect
