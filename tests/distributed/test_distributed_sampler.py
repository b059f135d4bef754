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


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n,replicas,consumed_steps", [(40, 2, 3), (23, 3, 2), (10, 4, 1)])
def test_start_resumes_each_rank_where_it_stopped(n, replicas, consumed_steps, drop_last):
    batch = 2
    for r in range(replicas):
        full = DistributedSampler(range(n), replicas, r, seed=3, drop_last=drop_last)
        full.set_epoch(4)
        whole = list(full)
        resumed = DistributedSampler(range(n), replicas, r, seed=3, drop_last=drop_last)
        resumed.set_epoch(4, start=consumed_steps * batch * replicas)
        assert list(resumed) == whole[consumed_steps * batch:]
        assert len(resumed) == len(whole) - consumed_steps * batch


def test_start_restripes_the_rest_over_a_new_world_size():
    n, start = 30, 12
    order = list(DistributedSampler(range(n), 1, 0, seed=1))
    rest = order[start:]
    got = []
    for r in range(4):
        s = DistributedSampler(range(n), 4, r, seed=1)
        s.load_state_dict({"epoch": 0, "start": start, "seed": 1})
        got.append(list(s))
    assert [len(g) for g in got] == [5] * 4  # 18 left, padded to 20
    striped = [got[r][k] for k in range(5) for r in range(4)]
    assert striped == rest + order[:2]  # the rest, then padding from the epoch's start


def test_state_dict_round_trip_and_bad_start():
    s = DistributedSampler(range(10), 2, 1, seed=4)
    s.set_epoch(2, start=4)
    t = DistributedSampler(range(10), 2, 1)
    t.load_state_dict(s.state_dict())
    assert list(t) == list(s) and t.state_dict() == {"epoch": 2, "start": 4, "seed": 4}
    with pytest.raises(ValueError, match="start must be an int in"):
        s.set_epoch(3, start=11)
    assert s.epoch == 2 and s.start == 4  # unchanged
    with pytest.raises(ValueError, match="missing"):
        t.load_state_dict({"epoch": 1})
