"""DistributedSampler: shards, padding and drop_last as PyTorch (index lists compared with
torch's own sampler when torch is installed), epochs, and use with DataLoader."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, DistributedSampler, TensorDataset


def shards(n, replicas, **kw):
    return [list(DistributedSampler(range(n), num_replicas=replicas, rank=r, **kw)) for r in range(replicas)]


@pytest.mark.parametrize("n,replicas", [(10, 3), (12, 3), (5, 4), (2, 3), (7, 2)])
def test_unshuffled_shards_pad_and_stride(n, replicas):
    got = shards(n, replicas, shuffle=False)
    total = -(-n // replicas) * replicas
    padded = [i % n for i in range(total)]
    for r, s in enumerate(got):
        assert s == padded[r::replicas]
        assert len(s) == len(DistributedSampler(range(n), replicas, r, shuffle=False))
    assert sorted(set(i for s in got for i in s)) == list(range(n))


@pytest.mark.parametrize("n,replicas", [(10, 3), (12, 3), (5, 4), (7, 2)])
def test_drop_last_drops_the_tail(n, replicas):
    got = shards(n, replicas, shuffle=False, drop_last=True)
    per = n // replicas
    assert [len(s) for s in got] == [per] * replicas
    flat = sorted(i for s in got for i in s)
    assert flat == list(range(per * replicas))


@pytest.mark.parametrize("drop_last", [False, True])
def test_matches_torch_index_lists(drop_last):
    torch = pytest.importorskip("torch")
    from torch.utils.data.distributed import DistributedSampler as TorchDS
    for n, replicas in [(10, 3), (11, 4), (3, 4), (8, 2)]:
        for r in range(replicas):
            ours = list(DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last))
            theirs = list(TorchDS(range(n), replicas, r, shuffle=False, drop_last=drop_last))
            assert ours == theirs, (n, replicas, r)
    del torch


def test_shuffle_same_order_on_every_rank_and_new_per_epoch():
    samplers = [DistributedSampler(range(20), 4, r, seed=3) for r in range(4)]
    first = [list(s) for s in samplers]
    assert sorted(i for s in first for i in s) == list(range(20))
    assert first != shards(20, 4, shuffle=False)
    assert [list(s) for s in samplers] == first  # same epoch, same order
    for s in samplers:
        s.set_epoch(1)
    second = [list(s) for s in samplers]
    assert second != first and sorted(i for s in second for i in s) == list(range(20))
    other_seed = [list(DistributedSampler(range(20), 4, r, seed=4)) for r in range(4)]
    assert other_seed != first


def test_bad_arguments():
    with pytest.raises(ValueError, match="invalid rank 3"):
        DistributedSampler(range(4), num_replicas=3, rank=3)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(range(4), num_replicas=0, rank=0)
    import tracejit.distributed as dist
    if not dist.is_initialized():
        with pytest.raises(RuntimeError, match=r"init_process_group\(\)"):
            DistributedSampler(range(4))


def test_with_dataloader():
    ds = TensorDataset(tj.arange(10).float())
    seen = []
    for r in range(2):
        loader = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, 2, r, shuffle=False))
        seen.append(np.concatenate([b[0].numpy() for b in loader]).tolist())
    assert seen == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
