"""A persistent-worker DataLoader's earlier iterator, left part-way when ``iter()`` is called
again, is exhausted rather than waiting for ever, as PyTorch's (whose loader resets its one
iterator at every ``iter()``)."""
import pytest

from tracejit.utils.data import DataLoader, IterableDataset

pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(6))


def _rows(it):
    return [b.tolist() for b in it]


@pytest.mark.parametrize("dataset", [list(range(6)), Stream()], ids=["map", "stream"])
def test_an_earlier_iterator_ends_when_a_later_one_starts(dataset):
    # (with a timeout, a wait for ever fails this test instead of hanging it)
    loader = DataLoader(dataset, batch_size=2, num_workers=1, persistent_workers=True, timeout=20)
    first = iter(loader)
    assert next(first).tolist() == [0, 1]
    assert _rows(iter(loader)) == [[0, 1], [2, 3], [4, 5]]
    assert _rows(first) == []
    early, later = iter(loader), None
    assert next(early).tolist() == [0, 1]
    later = iter(loader)
    assert _rows(later) == [[0, 1], [2, 3], [4, 5]] and _rows(early) == []
    assert _rows(loader) == [[0, 1], [2, 3], [4, 5]]
