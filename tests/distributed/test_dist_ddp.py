"""DistributedDataParallel: N ranks on their shards equal single-process full-batch training
step by step (eager, scripted, traced; SGD and Adam), buckets, no_sync, buffers, unused
parameters, mismatched models, rank-0 checkpoints. The checks live in workers/ddp_worker.py."""
import pytest

import tracejit as tj

TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo", "MPIR_CVAR_NOLOCAL": "1"}


def test_ddp_two_ranks_eager_and_compiled(mpirun, tmp_path):
    p = mpirun("ddp_worker.py", 2, tmp_path, "eager", "script", timeout=300)
    for line in ("eager sgd/adam OK", "script sgd/adam OK", "no_sync OK", "ddp OK"):
        assert p.out.count(line) == 2, p.out


def test_ddp_three_ranks_eager_scripted_and_traced(mpirun, tmp_path):
    p = mpirun("ddp_worker.py", 3, tmp_path, "eager", "script", "trace", timeout=300)
    for line in ("script sgd/adam OK", "trace sgd/adam OK", "ddp OK"):
        assert p.out.count(line) == 3, p.out


def test_ddp_loopback_tcp(mpirun, tmp_path):
    p = mpirun("ddp_worker.py", 2, tmp_path, "eager", env=TCP_ENV)
    assert p.out.count("ddp OK") == 2, p.out


def test_ddp_plain_python_world_size_one(mpirun, tmp_path):
    p = mpirun.python("ddp_worker.py", tmp_path, "eager")
    assert "rank 0/1: ddp OK" in p.out


def test_ddp_without_process_group_says_what_to_call():
    import tracejit.distributed as dist
    from tracejit.nn.parallel import DistributedDataParallel
    if dist.is_initialized():
        pytest.skip("a process group is live in this process")
    with pytest.raises(RuntimeError, match=r"tracejit.distributed.init_process_group\(\)"):
        DistributedDataParallel(tj.nn.Linear(2, 2))


def test_ddp_digits_example_two_ranks(mpirun):
    pytest.importorskip("sklearn", reason="examples/ddp_digits.py needs scikit-learn's digits")
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "ddp_digits.py"
    p = mpirun(str(example), 2, "--epochs", "3", timeout=300)
    assert "2 rank(s)" in p.out and "checkpoint round-trip OK" in p.out, p.out
