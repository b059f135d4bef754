"""After a batch's loading raises, the DataLoader's iterator goes on with the next batch, as
PyTorch's: a loop that catches a dataset's error and continues sees every other batch, with
workers or without."""
import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, Dataset


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
            got.append(next(it).tolist())
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
