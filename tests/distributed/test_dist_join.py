"""DistributedDataParallel.join(): uneven inputs train to the parameters a single process
replaying the same steps reaches, on every rank (the checks live in workers/join_worker.py)."""
import pytest


@pytest.mark.parametrize("args", [("initial",), ("active", "buffers")])
def test_join_trains_uneven_inputs(mpirun, args):
    p = mpirun("join_worker.py", 3, *args, timeout=120)
    for r, batches in ((0, 2), (1, 3), (2, 4)):
        assert f"rank {r}/3: join ({', '.join(args)}) OK after {batches} batches" in p.out, p.out


def test_join_in_a_group_of_one(mpirun):
    p = mpirun.python("join_worker.py", "initial")
    assert "rank 0/1: join (initial) OK after 2 batches" in p.out
