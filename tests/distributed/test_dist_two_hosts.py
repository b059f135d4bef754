"""Two hosts without two machines: ranks in two network namespaces joined by a veth pair,
talking TCP (libfabric's tcp provider) through it; DDP equals single-process training
(the checks of workers/ddp_worker.py). Skipped with the reason where namespaces cannot
be made (not root, no iproute2, a sandbox that forbids them)."""
import subprocess
import sys
import time

import pytest

from bench.netns_hosts import TwoHosts, skip_reason

from conftest import ROOT, WORKERS, _env, find_mpiexec  # noqa: E402  (tests/distributed/conftest.py)


@pytest.fixture(scope="module")
def two_hosts():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with TwoHosts() as hosts:
        yield hosts


def test_ddp_across_two_namespaces_equals_single_process(mpirun, two_hosts, tmp_path):
    sent0 = two_hosts.tx_bytes(0)
    cmd = two_hosts.mpiexec_cmd(find_mpiexec(), 2, [sys.executable, str(WORKERS / "ddp_worker.py"),
                                                    str(tmp_path), "eager"])
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=two_hosts.env(_env()), cwd=str(ROOT), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-6000:]
    for r in (0, 1):
        assert f"rank {r}/2: ddp OK" in p.stdout, p.stdout
    # the ranks really talked over the veth pair (not shared memory): the model checks,
    # broadcasts and gradient all-reduces of ddp_worker.py move well over 20 kB
    assert two_hosts.tx_bytes(0) - sent0 > 20_000
    assert time.monotonic() - t0 < 240


def test_each_rank_runs_in_its_own_namespace(mpirun, two_hosts):
    code = ("import os, tracejit.distributed as d; d.init_process_group(); "
            "got = [None] * 2; d.all_gather_object(got, os.readlink('/proc/self/ns/net')); "
            "print(f'namespaces {d.get_rank()} {len(set(got))}', flush=True)")
    cmd = two_hosts.mpiexec_cmd(find_mpiexec(), 2, [sys.executable, "-c", code])
    p = subprocess.run(cmd, env=two_hosts.env(_env()), cwd=str(ROOT), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    assert "namespaces 0 2" in p.stdout and "namespaces 1 2" in p.stdout, p.stdout
