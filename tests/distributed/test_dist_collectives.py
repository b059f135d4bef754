"""tracejit.distributed collectives against numpy, under mpiexec on 2 and 3 ranks, over
shared memory and over loopback TCP (stand-in for ranks on several hosts), and as a plain
``python`` process (world size 1). The checks live in workers/collectives_worker.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo", "MPIR_CVAR_NOLOCAL": "1"}


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_shared_memory(mpirun, n):
    p = mpirun("collectives_worker.py", n)
    assert p.out.count("collectives OK") == n


def test_collectives_loopback_tcp(mpirun):
    p = mpirun("collectives_worker.py", 2, env=TCP_ENV)
    assert p.out.count("collectives OK") == 2


def test_plain_python_is_world_size_one(mpirun):
    p = mpirun.python("collectives_worker.py")
    assert "rank 0/1: collectives OK" in p.out


def test_import_does_not_load_mpi4py():
    code = ("import sys, tracejit, tracejit.distributed, tracejit.nn.parallel; "
            "assert 'mpi4py' not in sys.modules; "
            "import tracejit.distributed as d; assert not d.is_initialized()")
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env, cwd=root)


def test_collective_without_group_says_what_to_call():
    import tracejit as tj
    import tracejit.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group is live in this process")
    with pytest.raises(RuntimeError, match=r"init_process_group\(\)"):
        dist.all_reduce(tj.ones(2))
    with pytest.raises(RuntimeError, match=r"init_process_group\(\)"):
        dist.get_world_size()
    with pytest.raises(RuntimeError, match=r"init_process_group\(\)"):
        dist.get_rank()


def test_only_the_default_group():
    import tracejit as tj
    import tracejit.distributed as dist
    with pytest.raises(ValueError, match="only the default process group"):
        dist.all_reduce(tj.ones(2), group=object())
    with pytest.raises(ValueError, match="get_rank: only the default process group"):
        dist.get_rank(group=object())
    # dist.group.WORLD names the default group: only the missing group is complained of
    assert dist.group.WORLD is dist.GroupMember.WORLD
    if not dist.is_initialized():
        with pytest.raises(RuntimeError, match=r"init_process_group\(\)"):
            dist.get_world_size(dist.group.WORLD)
