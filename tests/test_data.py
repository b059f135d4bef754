"""tracejit.data / tracejit.utils.data: datasets, samplers, DataLoader batching, shuffle, collate."""
from collections import namedtuple

import numpy as np
import pytest

import tracejit as tj
from tracejit.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset,
                           RandomSampler, Subset, TensorDataset, default_collate, random_split)


def test_module_aliases():
    import tracejit.utils.data as tud
    assert tud.DataLoader is DataLoader and tj.utils.data.TensorDataset is TensorDataset
    assert tj.data.DataLoader is DataLoader


def test_tensor_dataset_items_and_errors():
    x, y = tj.arange(10).reshape(5, 2), tj.tensor([0, 1, 0, 1, 1])
    ds = TensorDataset(x, y)
    assert len(ds) == 5
    a, b = ds[3]
    assert a.tolist() == [6, 7] and b.item() == 1
    with pytest.raises(ValueError, match="tensor 0 has 5 rows but tensor 1 has 4"):
        TensorDataset(x, tj.zeros(4))
    with pytest.raises(TypeError, match="argument 1"):
        TensorDataset(x, [1, 2, 3, 4, 5])


def test_batching_sequential_and_drop_last():
    x = tj.arange(10, dtype=tj.float32).reshape(10, 1)
    y = tj.arange(10)
    dl = DataLoader(TensorDataset(x, y), batch_size=4)
    batches = list(dl)
    assert len(dl) == 3 and len(batches) == 3
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 1) and batches[0][0].dtype is tj.float32
    assert isinstance(batches[0], list)  # tuples collate to lists, as in PyTorch
    dl = DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True)
    assert len(dl) == 2 and [b[1].tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # batches are copies, not views into the dataset
    b = next(iter(DataLoader(TensorDataset(x), batch_size=2)))[0]
    b.add_(100)
    assert x[0].item() == 0.0


def test_shuffle_is_a_permutation_reproducible_with_manual_seed():
    y = tj.arange(20)
    dl = DataLoader(TensorDataset(y), batch_size=6, shuffle=True)

    def epoch():
        return [v for (b,) in dl for v in b.tolist()]

    tj.manual_seed(3)
    e1, e2 = epoch(), epoch()
    assert sorted(e1) == list(range(20)) and sorted(e2) == list(range(20))
    assert e1 != list(range(20)) and e1 != e2  # a fresh order each epoch
    tj.manual_seed(3)
    assert epoch() == e1 and epoch() == e2


class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": np.full(2, i, dtype=np.float32), "y": i * i, "name": f"s{i}", "w": 0.5 * i}


def test_default_collate_dicts_numbers_strings_numpy():
    batch = next(iter(DataLoader(Squares(), batch_size=3)))
    assert set(batch) == {"x", "y", "name", "w"}
    assert batch["x"].shape == (3, 2) and batch["x"].dtype is tj.float32
    assert batch["y"].tolist() == [0, 1, 4] and batch["y"].dtype is tj.int64
    assert batch["w"].dtype is tj.float64
    assert batch["name"] == ["s0", "s1", "s2"]
    Pt = namedtuple("Pt", "a b")
    out = default_collate([Pt(tj.ones(2), 1), Pt(tj.zeros(2), 2)])
    assert isinstance(out, Pt) and out.a.shape == (2, 2) and out.b.tolist() == [1, 2]
    assert default_collate([True, False]).dtype is tj.bool
    assert default_collate([[1, 2], [3, 4]])[0].tolist() == [1, 3]
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([tj.ones(2), tj.ones(3)])
    with pytest.raises(TypeError, match="found object"):
        default_collate([object(), object()])


def test_custom_collate_and_unbatched():
    dl = DataLoader(Squares(), batch_size=2, collate_fn=lambda items: [it["y"] for it in items])
    assert list(dl) == [[0, 1], [4, 9], [16]]
    items = list(DataLoader(Squares(), batch_size=None))
    assert len(items) == 5 and items[2]["x"].shape == (2,)


def test_iterable_dataset():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="IterableDataset"):
        DataLoader(Stream(), shuffle=True)


def test_samplers_subset_concat_split():
    ds = TensorDataset(tj.arange(10))
    bs = BatchSampler(range(5), 2, drop_last=False)
    assert list(bs) == [[0, 1], [2, 3], [4]] and len(bs) == 3
    tj.manual_seed(0)
    assert sorted(RandomSampler(ds)) == list(range(10))
    assert len(list(RandomSampler(ds, num_samples=25))) == 25
    sub = Subset(ds, [9, 0])
    assert [sub[i][0].item() for i in range(2)] == [9, 0]
    cat = ConcatDataset([sub, ds])
    assert len(cat) == 12 and cat[2][0].item() == 0 and cat[-1][0].item() == 9
    tj.manual_seed(0)
    a, b = random_split(ds, [7, 3])
    assert len(a) == 7 and len(b) == 3 and sorted(a.indices + b.indices) == list(range(10))
    a, b = random_split(ds, [0.5, 0.5])
    assert len(a) == len(b) == 5
    with pytest.raises(ValueError, match="summing"):
        random_split(ds, [5, 6])
    dl = DataLoader(ds, batch_sampler=[[0, 5], [9]])
    assert [b[0].tolist() for b in dl] == [[0, 5], [9]]


def test_dataloader_bad_arguments():
    ds = TensorDataset(tj.arange(4))
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=range(4), shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        DataLoader(ds, batchsize=2)
    with pytest.raises(TypeError, match="len"):
        DataLoader(42)


def test_batches_of_a_split_tensor_dataset_equal_collated_samples():
    x = tj.tensor(np.arange(40, dtype=np.float32).reshape(20, 2))
    y = tj.tensor(np.arange(20))
    train, _ = random_split(TensorDataset(x, y), [12, 8], generator=tj.Generator().manual_seed(1))
    nested = Subset(train, [5, 0, 3, 11, 2])
    for ds in (train, nested):
        fast = list(DataLoader(ds, batch_size=4))
        slow = list(DataLoader(ds, batch_size=4, collate_fn=lambda b: default_collate(b)))
        assert len(fast) == len(slow)
        for (fx, fy), (sx, sy) in zip(fast, slow):
            assert fx.dtype == sx.dtype and fy.dtype == sy.dtype == tj.int64
            np.testing.assert_array_equal(fx.numpy(), sx.numpy())
            np.testing.assert_array_equal(fy.numpy(), sy.numpy())
    first = next(iter(DataLoader(nested, batch_size=2)))
    np.testing.assert_array_equal(first[1].numpy(), [train.indices[5], train.indices[0]])


def test_default_collate_stacks_views_and_keeps_graphs():
    base = tj.tensor(np.arange(12.0).reshape(3, 4))
    rows = [base[:, 1], base[:, 3]]                     # strided views
    out = default_collate(rows)
    np.testing.assert_array_equal(out.numpy(), [[1.0, 5.0, 9.0], [3.0, 7.0, 11.0]])
    base[0, 1] = 100.0
    assert out.numpy()[0, 0] == 1.0                     # a copy, as PyTorch's stack
    w = tj.ones(2, requires_grad=True)
    batched = default_collate([w * 2, w * 3])
    batched.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [5.0, 5.0])


def test_subset_random_sampler_draws_from_its_generator():
    from tracejit.utils.data import SubsetRandomSampler
    orders = [list(SubsetRandomSampler([5, 6, 7, 8], generator=tj.Generator().manual_seed(4)))
              for _ in range(2)]
    assert orders[0] == orders[1] and sorted(orders[0]) == [5, 6, 7, 8]
    g = tj.Generator().manual_seed(4)
    s = SubsetRandomSampler([5, 6, 7, 8], generator=g)
    first, second = list(s), list(s)
    assert first == orders[0] and sorted(second) == [5, 6, 7, 8]
