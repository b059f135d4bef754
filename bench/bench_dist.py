"""Distributed workload: all-reduce bandwidth and the data-parallel MLP step, over MPI.

Run:  ``python bench/bench_dist.py [--quick] [--ranks 2] [--tcp] [--steps N] [--links] [--out FILE]``

The script launches itself under ``mpiexec`` (found next to this Python, then on PATH)
and prints a Markdown table; it is not part of ``python -m bench`` (that runs one process
per system). Without mpi4py or mpiexec it prints what to install and exits 0.

- **all-reduce**: float32 tensors of 64 B (latency: shows the agreement check's cost),
  4 MB and 25 MB (DDP's default bucket size), summed
  over the ranks: ``tj.distributed.all_reduce`` (which first checks the ranks agree on
  shape and dtype), the same with ``async_op=True`` + ``wait()``, and mpi4py's
  ``Allreduce(IN_PLACE)`` on a numpy array (the floor tracejit adds to), and the bucket
  all-reduce DDP runs (non-blocking, waited in the watchdog, no agreement check). Each sample
  starts after a barrier; the figure is rank 0's median. ``busbw`` is the algorithmic
  bandwidth times 2(N-1)/N, the bytes a ring all-reduce moves per rank.
- **MLP step** (the ``mlp`` workload of ``python -m bench``: batch 256, 784-1024-1024-10,
  LayerNorm + GELU, cross-entropy, Adam) with the global batch split over the ranks:
  tracejit DDP eager, tracejit DDP over ``tj.script(model)``, and, when PyTorch is
  installed, torch DDP with the gloo backend (its own launch; rendezvous on 127.0.0.1),
  plus one plain process with the whole batch for scale. Every rank runs one thread
  (``OMP_NUM_THREADS=1``): N ranks share the machine's cores. The final loss is the
  check value: the same init and data give the same loss in every system.
- **links** (``--links``): the bucket all-reduce's bandwidth against the link's, over
  loopback TCP and over a veth pair between two network namespaces (bench/netns_hosts.py;
  root only). The link's bandwidth is one TCP stream's (4 MB writes, the same Python on
  both ends), alone and with a second stream the other way at once (an all-reduce sends
  both ways); the all-reduce's is its bus bandwidth (2(N-1)/N x bytes / time), the bytes
  each rank sends per direction.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo", "MPIR_CVAR_NOLOCAL": "1"}
SIZES = ((64, "64 B"), (4 << 20, "4 MB"), (25 << 20, "25 MB"))  # 64 B: latency, and the agreement check's cost


def find_mpiexec():
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


# ---------------------------------------------------------------- worker side (under mpiexec)
def _median_ms(samples):
    return statistics.median(samples) * 1e3


def worker_allreduce(args) -> dict:
    import tracejit as tj
    import tracejit.distributed as dist
    dist.init_process_group()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    n = dist.get_world_size()
    out = {}
    sizes = SIZES[:2] if args.quick else SIZES
    if args.sizes:
        sizes = [(int(b), lbl) for b, lbl in SIZES if lbl.replace(" ", "") in args.sizes.split(",")]
    for nbytes, label in sizes:
        numel = nbytes // 4
        arr = np.ones(numel, np.float32)
        t = tj.ones(numel)
        repeat = 5 if args.quick else (200 if nbytes < 1 << 20 else 30 if nbytes <= 4 << 20 else 12)

        def timed(fn):
            for _ in range(2):
                fn()
            samples = []
            for _ in range(repeat):
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
            return _median_ms(samples)

        from tracejit.distributed import process_group as pg
        world = pg._group.world
        row = {"mpi4py Allreduce": timed(lambda: comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM)),
               "tj all_reduce": timed(lambda: dist.all_reduce(t)),
               "tj all_reduce async+wait": timed(lambda: dist.all_reduce(t, async_op=True).wait()),
               "tj bucket (DDP)": timed(lambda: world.allreduce(arr, MPI.SUM, "bench bucket"))}
        out[label] = {k: {"ms": v, "algbw_GBps": nbytes / (v * 1e-3) / 1e9,
                          "busbw_GBps": 2 * (n - 1) / n * nbytes / (v * 1e-3) / 1e9}
                      for k, v in row.items()}
    return out


def _shard(data: dict, rank: int, n: int):
    from bench.workloads import MLP_BATCH
    lo, hi = rank * MLP_BATCH // n, (rank + 1) * MLP_BATCH // n
    return data["x"][lo:hi], data["labels"][lo:hi]


def _steps(step, args):
    warm, steps = (2, 4) if args.quick else (3, args.steps)
    for _ in range(warm):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    return times, loss


def worker_mlp_tracejit(args) -> dict:
    import tracejit as tj
    import tracejit.distributed as dist
    from bench.impls.torchlike import load_mlp, make_mlp
    from bench.workloads import MLP_LR, mlp_data
    from tracejit.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    data = mlp_data()
    x, labels = _shard(data, r, n)
    x, labels = tj.tensor(x), tj.tensor(labels)
    out = {}
    for mode in ("eager", "script"):
        model = make_mlp(tj)
        load_mlp(tj, model, data, tj.tensor)
        ddp = DDP(tj.script(model) if mode == "script" else model)
        opt = tj.optim.Adam(ddp.parameters(), lr=MLP_LR)

        def step():
            opt.zero_grad()
            loss = tj.nn.functional.cross_entropy(ddp(x), labels)
            loss.backward()
            opt.step()
            return loss

        times, loss = _steps(step, args)
        # the job's step time is its slowest rank's
        worst = max(_gather_floats(dist, _median_ms(times)))
        mean_loss = statistics.mean(_gather_floats(dist, float(loss.item())))  # = the whole batch's
        out[f"tracejit DDP {mode}"] = {"ms": worst, "loss": mean_loss}
    return out


def _gather_floats(dist, v: float) -> list:
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, v)
    return got


def worker_mlp_torch(args) -> dict:
    import torch
    import torch.distributed as tdist
    from bench.impls.torchlike import load_mlp, make_mlp
    from bench.workloads import MLP_LR, mlp_data
    torch.set_num_threads(1)
    r, n = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=r, world_size=n)
    data = mlp_data()
    x, labels = _shard(data, r, n)
    x, labels = torch.tensor(x), torch.tensor(labels)
    model = make_mlp(torch)
    load_mlp(torch, model, data, torch.tensor)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=MLP_LR)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), labels)
        loss.backward()
        opt.step()
        return loss

    times, loss = _steps(step, args)
    got, losses = [None] * n, [None] * n
    tdist.all_gather_object(got, _median_ms(times))
    tdist.all_gather_object(losses, float(loss.item()))
    tdist.destroy_process_group()
    return {"torch DDP gloo eager": {"ms": max(got), "loss": statistics.mean(losses)}}


def _single_step(args, x, labels, compiled: bool):
    import tracejit as tj
    from bench.impls.torchlike import load_mlp, make_mlp
    from bench.workloads import MLP_LR, mlp_data
    model = make_mlp(tj)
    load_mlp(tj, model, mlp_data(), tj.tensor)
    fwd = tj.script(model) if compiled else model
    opt = tj.optim.Adam(model.parameters(), lr=MLP_LR)

    def step():
        opt.zero_grad()
        loss = tj.nn.functional.cross_entropy(fwd(x), labels)
        loss.backward()
        opt.step()
        return loss

    times, loss = _steps(step, args)
    return {"ms": _median_ms(times), "loss": float(loss.item())}


def worker_single(args) -> dict:
    """One process, whole batch: the scale the data-parallel figures compare with."""
    import tracejit as tj
    from bench.workloads import mlp_data
    data = mlp_data()
    x, labels = tj.tensor(data["x"]), tj.tensor(data["labels"])
    threads = os.environ.get("NUMBA_NUM_THREADS", "?")
    return {f"tracejit eager, 1 process x {threads} threads, whole batch": _single_step(args, x, labels, False)}


def worker_shard(args) -> dict:
    """One rank's share of the work without any communication: what DDP adds is the rest."""
    import tracejit as tj
    from bench.workloads import mlp_data
    x, labels = _shard(mlp_data(), 0, args.ranks)
    x, labels = tj.tensor(x), tj.tensor(labels)
    out = {}
    for compiled in (False, True):
        res = _single_step(args, x, labels, compiled)
        res["loss"] = float("nan")  # one shard's loss: not comparable with the others
        out[f"tracejit {'script' if compiled else 'eager'}, 1 process x 1 thread, one rank's shard, "
            f"no communication"] = res
    return out


def worker_stream(args) -> dict:
    """One end of a TCP stream: --stream-role server|client|both-server|both-client at --stream-host."""
    import socket
    import threading
    chunk, total = 4 << 20, args.stream_mb << 20
    role, host, port = args.stream_role, args.stream_host, args.port

    def recv(sock, out):
        buf = memoryview(bytearray(chunk))
        got, t0 = 0, time.perf_counter()
        while got < total:
            k = sock.recv_into(buf, min(chunk, total - got))
            if not k:
                break
            got += k
        out.append(got / (time.perf_counter() - t0) / 1e9)

    def send(sock):
        data = memoryview(bytes(chunk))
        sent = 0
        while sent < total:
            k = min(chunk, total - sent)
            sock.sendall(data[:k])
            sent += k
        sock.shutdown(socket.SHUT_WR)

    if role.endswith("server"):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, port))
        ls.listen(1)
        Path(args.json + ".ready").write_text("1")
        sock, _ = ls.accept()
    else:
        for _ in range(200):
            if Path(args.json + ".ready").exists():
                break
            time.sleep(0.05)
        sock = socket.create_connection((host, port))
    rates: list = []
    if role.startswith("both"):
        th = threading.Thread(target=send, args=(sock,))
        th.start()
        recv(sock, rates)
        th.join()
    elif role == "server":
        recv(sock, rates)
    else:
        send(sock)
        rates.append(float("nan"))
    return {"GBps": rates[0]}


WORKERS = {"stream": worker_stream, "allreduce": worker_allreduce, "mlp": worker_mlp_tracejit, "torch": worker_mlp_torch,
           "single": worker_single, "shard": worker_shard}


def worker_main(args) -> None:
    res = WORKERS[args.worker](args)
    rank = int(os.environ.get("PMI_RANK", "0"))
    if rank == 0 and not (args.worker == "stream" and args.stream_role in ("client", "both-client")):
        Path(args.json).write_text(json.dumps(res))


# ---------------------------------------------------------------- parent side
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(what: str, n: int, args, extra_env=None, hosts=None, extra=()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "out.json")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", what, "--json", js,
               "--steps", str(args.steps), "--port", str(_free_port()), "--ranks", str(args.ranks),
               "--sizes", args.sizes or ""] + (["--quick"] if args.quick else []) + list(extra)
        if n > 0 and hosts is not None:
            cmd = hosts.mpiexec_cmd(find_mpiexec(), n, cmd)
        elif n > 0:
            cmd = [find_mpiexec(), "-n", str(n)] + cmd
        env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")
        env.update(extra_env or {})
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=args.timeout)
        print(f"  {what} on {max(n, 1)} process(es): {time.perf_counter() - t0:.1f} s", flush=True)
        if p.returncode != 0 or not os.path.exists(js):
            print(p.stdout[-3000:])
            return {"error": f"{what} exited with {p.returncode}"}
        return json.loads(Path(js).read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 MB only, few repeats and steps")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--tcp", action="store_true", help="MPICH over loopback TCP instead of shared memory")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip-mlp", action="store_true")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--links", action="store_true", help="bucket all-reduce vs link bandwidth (loopback, veth)")
    ap.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    ap.add_argument("--stream-role", default="", help=argparse.SUPPRESS)
    ap.add_argument("--stream-host", default="", help=argparse.SUPPRESS)
    ap.add_argument("--stream-mb", type=int, default=1024, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("bench_dist needs mpi4py and an MPI: pip install 'tracejit[dist]' (mpi4py + mpich)")
        return 0
    if find_mpiexec() is None:
        print("bench_dist needs mpiexec next to this Python or on PATH: pip install mpich")
        return 0
    env = TCP_ENV if args.tcp else {}
    transport = "loopback TCP" if args.tcp else "shared memory"
    n = args.ranks
    load0 = os.getloadavg()[0]
    print(f"bench_dist: {n} ranks over {transport}, {os.cpu_count()} cores, load average {load0:.2f}", flush=True)
    results = {"ranks": n, "transport": transport, "cpus": os.cpu_count(), "load_before": load0}
    if args.links:
        results["links"] = links(args)
        results["load_after"] = os.getloadavg()[0]
        print(report_links(results))
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))
        return 0
    results["allreduce"] = _launch("allreduce", n, args, env)
    if not args.skip_mlp:
        mlp = {}
        threads = {k: str(n) for k in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS",
                                       "OPENBLAS_NUM_THREADS")}
        def add(what, got):
            mlp.update({f"{what}: error": got} if "error" in got else got)
        add("single", _launch("single", 0, args, threads))
        add("shard", _launch("shard", 0, args))
        add("mlp", _launch("mlp", n, args, env))
        try:
            import torch  # noqa: F401
            add("torch", _launch("torch", n, args))
        except ImportError:
            mlp["torch DDP gloo eager"] = {"skipped": "PyTorch is not installed"}
        results["mlp"] = mlp
    results["load_after"] = os.getloadavg()[0]
    print(report(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    failed = "error" in results["allreduce"] or any("error" in v for v in results.get("mlp", {}).values())
    return 1 if failed else 0


def report(res: dict) -> str:
    n = res["ranks"]
    lines = [f"\n1-minute load average {res['load_before']:.2f} before, {res['load_after']:.2f} after "
             f"({res['cpus']} cores): above the core count, every figure is inflated",
             f"\nall-reduce (float32 sum), {n} ranks over {res['transport']}: rank 0's median ms "
             f"(algbw / busbw GB/s, busbw = algbw x 2(N-1)/N)", "",
             "| size | " + " | ".join(["mpi4py Allreduce", "tj all_reduce", "tj all_reduce async+wait",
                                      "tj bucket (DDP)"]) + " |",
             "|---|---|---|---|---|"]
    ar = res["allreduce"]
    if "error" in ar:
        lines.append(f"| {ar['error']} | | | | |")
    else:
        for size, row in ar.items():
            cells = [f"{v['ms'] * 1e3:.0f} us" if size == "64 B" else
                     f"{v['ms']:.2f} ({v['algbw_GBps']:.1f} / {v['busbw_GBps']:.1f})" for v in row.values()]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
    if "mlp" in res:
        lines += ["", f"MLP step (batch 256 split over {n} ranks, 1 thread per rank; slowest rank's median; "
                      f"final loss = mean over ranks of their shard's loss = the whole batch's)", "",
                  "| system | ms/step | final loss |", "|---|---|---|"]
        for k, v in res["mlp"].items():
            if "ms" in v:
                loss = "-" if v["loss"] != v["loss"] else f"{v['loss']:.5f}"
                lines.append(f"| {k} | {v['ms']:.1f} | {loss} |")
            else:
                lines.append(f"| {k} | {v.get('skipped') or v.get('error')} | |")
    return "\n".join(lines)


# ---------------------------------------------------------------- links
def _stream_pair(args, cmd_prefixes, host: str, both: bool) -> float:
    """Run a TCP stream between two processes (prefixes: how to start each end); the receiver's GB/s."""
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "stream.json")
        port = str(_free_port())
        base = [sys.executable, str(Path(__file__).resolve()), "--worker", "stream", "--json", js, "--port", port,
                "--stream-host", host, "--stream-mb", str(256 if args.quick else 2048)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        srv = subprocess.Popen(cmd_prefixes[1] + base + ["--stream-role", "both-server" if both else "server"], env=env)
        cli = subprocess.Popen(cmd_prefixes[0] + base + ["--stream-role", "both-client" if both else "client"], env=env)
        cli.wait(timeout=args.timeout)
        srv.wait(timeout=args.timeout)
        return json.loads(Path(js).read_text())["GBps"]


def links(args) -> dict:
    """Bucket all-reduce bus bandwidth against the link's, over loopback TCP and a veth pair."""
    from bench.netns_hosts import TwoHosts, skip_reason
    args.sizes = "4MB,25MB"
    out = {}
    plans = [("loopback TCP", None)]
    reason = skip_reason()
    if reason is None:
        plans.append(("veth pair (two namespaces)", TwoHosts))
    else:
        out["veth pair (two namespaces)"] = {"skipped": reason}
    for name, maker in plans:
        if maker is None:
            prefixes, host, hosts = ([], []), "127.0.0.1", None
            row = _links_row(args, prefixes, host, None, TCP_ENV)
        else:
            with maker() as hosts:
                row = _links_row(args, (hosts.exec_prefix(0), hosts.exec_prefix(1)), hosts.addrs[1], hosts,
                                 hosts.env({}))
        out[name] = row
    return out


def _links_row(args, prefixes, host, hosts, env) -> dict:
    one = max(_stream_pair(args, prefixes, host, False) for _ in range(2))
    both = max(_stream_pair(args, prefixes, host, True) for _ in range(2))
    ar = _launch("allreduce", 2, args, env, hosts=hosts)
    return {"link one way GBps": one, "link both ways GBps (each way)": both, "allreduce": ar}


def report_links(res: dict) -> str:
    lines = [f"\n1-minute load average {res['load_before']:.2f} before, {res['load_after']:.2f} after",
             "\nbucket all-reduce (float32 sum, 2 ranks) against the link: bus bandwidth GB/s "
             "(= bytes each rank sends each way / time) and its fraction of the link's, one way / both ways at once", "",
             "| link | TCP one way | TCP both ways (each) | size | mpi4py Allreduce | tj bucket (DDP) |",
             "|---|---|---|---|---|---|"]
    for name, row in res["links"].items():
        if "skipped" in row:
            lines.append(f"| {name} | skipped: {row['skipped']} | | | | |")
            continue
        one, both = row["link one way GBps"], row["link both ways GBps (each way)"]
        ar = row["allreduce"]
        if "error" in ar:
            lines.append(f"| {name} | {one:.2f} | {both:.2f} | {ar['error']} | | |")
            continue
        for size, cells in ar.items():
            def cell(k):
                bw = cells[k]["busbw_GBps"]
                return f"{bw:.2f} ({bw / one:.0%} / {bw / both:.0%})"
            lines.append(f"| {name} | {one:.2f} | {both:.2f} | {size} | {cell('mpi4py Allreduce')} | "
                         f"{cell('tj bucket (DDP)')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
