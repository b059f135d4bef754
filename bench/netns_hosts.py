"""Two "hosts" on one machine: two network namespaces joined by a veth pair (needs root).

`TwoHosts` creates namespaces ``tj<pid><a|b>``, a veth pair whose ends are both named
``tjnet0`` (so ``FI_TCP_IFACE``/``-iface`` are the same on both sides) with addresses
10.213.0.1 and 10.213.0.2, and a launcher script for MPICH's hydra: hydra starts the
proxy of each host through it as it would through ssh, and the script runs the proxy in
that host's namespace. `mpiexec_cmd` gives the command that starts N ranks split over
the two hosts, talking TCP over the veth pair (libfabric's tcp provider): MPICH then
sees two nodes, so no shared memory between them. Everything is removed on exit.
`skip_reason()` says why namespaces cannot be made here (None when they can).
Used by tests/distributed/test_dist_two_hosts.py and bench/bench_dist.py.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional

__all__ = ["TwoHosts", "skip_reason", "IFACE"]

IFACE = "tjnet0"
ADDRS = ("10.213.0.1", "10.213.0.2")
NET_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": IFACE}

_LAUNCHER = """#!/bin/sh
# hydra runs: <this> [ssh options] HOST COMMAND...; run COMMAND in HOST's namespace
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case $host in
%s
  *) echo "netns launcher: unknown host $host" >&2; exit 1;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


def _ip(*args: str) -> None:
    p = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    if p.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {p.stdout.strip()}")


def skip_reason() -> Optional[str]:
    """None when two namespaces and a veth pair can be made here, else why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    try:
        with TwoHosts():
            pass
    except OSError as exc:
        return f"cannot make two network namespaces with a veth pair here: {exc}"
    return None


class TwoHosts:
    """``with TwoHosts() as h: subprocess.run(h.mpiexec_cmd(mpiexec, 2, [python, script]), env=h.env())``."""

    def __init__(self) -> None:
        tag = f"tj{os.getpid()}"
        self.names = (tag + "a", tag + "b")
        self.addrs = ADDRS
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        self.launcher = ""

    def __enter__(self) -> "TwoHosts":
        a, b = self.names
        made = []
        try:
            for ns in self.names:
                _ip("netns", "add", ns)
                made.append(ns)
            va, vb = f"v{a}", f"v{b}"   # at most 15 characters
            _ip("link", "add", va, "type", "veth", "peer", "name", vb)
            for ns, v, addr in ((a, va, ADDRS[0]), (b, vb, ADDRS[1])):
                _ip("link", "set", v, "netns", ns)
                _ip("-n", ns, "link", "set", v, "name", IFACE)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", IFACE)
                _ip("-n", ns, "link", "set", IFACE, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except (OSError, subprocess.TimeoutExpired) as exc:
            for ns in made:
                subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
            raise OSError(str(exc)) from None
        self._tmp = tempfile.TemporaryDirectory(prefix="tj-netns-")
        cases = "\n".join(f"  {addr}) ns={ns};;" for addr, ns in zip(ADDRS, self.names))
        path = Path(self._tmp.name, "launch")
        path.write_text(_LAUNCHER % cases)
        path.chmod(0o755)
        self.launcher = str(path)
        return self

    def __exit__(self, *exc) -> None:
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        if self._tmp is not None:
            self._tmp.cleanup()

    def exec_prefix(self, host: int) -> List[str]:
        """Run a command on host 0 or 1: ``exec_prefix(1) + ["python", ...]``."""
        return ["ip", "netns", "exec", self.names[host]]

    def mpiexec_cmd(self, mpiexec: str, n: int, command: List[str]) -> List[str]:
        """mpiexec started on host 0, ranks alternating over the two hosts (block of n/2 each)."""
        per = (n + 1) // 2
        return self.exec_prefix(0) + [mpiexec, "-hosts", f"{ADDRS[0]}:{per},{ADDRS[1]}:{per}", "-n", str(n),
                                      "-launcher", "ssh", "-launcher-exec", self.launcher, "-iface", IFACE] + command

    @staticmethod
    def env(base: Optional[dict] = None) -> dict:
        """The environment for the ranks: MPICH over libfabric's tcp provider on the veth pair."""
        env = dict(os.environ if base is None else base)
        env.update(NET_ENV)
        return env

    def tx_bytes(self, host: int = 0) -> int:
        """Bytes sent so far through host's end of the veth pair."""
        p = subprocess.run(self.exec_prefix(host) + ["cat", f"/sys/class/net/{IFACE}/statistics/tx_bytes"],
                           stdout=subprocess.PIPE, text=True, timeout=30, check=True)
        return int(p.stdout)
