"""Batched reads through ``__getitems__``: the DataLoader hands a dataset that defines it
each batch's indices at once, and Subset forwards them to its dataset, as PyTorch's (what
was read, and how, compared with PyTorch's calls)."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _reads(m, wrap, **loader):
    calls = []

    class Batched(m.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            calls.append(("one", i))
            return i

        def __getitems__(self, idx):
            calls.append(("many", list(idx)))
            return [i * 10 for i in idx]
    ds = Batched()
    if wrap:
        ds = m.utils.data.Subset(ds, [5, 0, 2, 3])
    batches = [b.tolist() for b in m.utils.data.DataLoader(ds, **loader)]
    return batches, calls


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("loader", [{"batch_size": 3}, {"batch_size": 2, "drop_last": True},
                                    {"batch_sampler": [[1, 0], [3]]}])
def test_loader_reads_batches_through_getitems_as_torch(wrap, loader):
    assert _reads(tj, wrap, **loader) == _reads(torch, wrap, **loader)


def test_subset_getitems_of_a_plain_dataset():
    s = tj.utils.data.Subset(list(range(10, 20)), [5, 0, 2])
    assert s.__getitems__([0, 2]) == [15, 12]
