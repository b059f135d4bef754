"""DataLoader(num_workers > 0): same batches and order as num_workers=0, seeding, errors, shutdown,
and the start method: fork where it is safe, else spawn, and a script spawn cannot run is
refused at once."""
import gc
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import threading
import time
import types

import numpy as np
import pytest

import tracejit as tj
from tracejit.utils.data import _workers as data_workers
from tracejit.utils.data import (DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info,
                                 random_split)


class Squares(Dataset):
    """(a tensor, a Python int, a dict) per index; module level, so spawned workers can unpickle it."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        return tj.tensor([float(i), float(i * i)]), i, {"neg": tj.tensor(-i)}


class WhoLoads(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = get_worker_info()
        return tj.tensor([i, info.id, os.getpid(), int(np.random.randint(0, 1 << 30))])


class Fails(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("item 5 is broken")
        return tj.tensor(float(i))


class Stream(IterableDataset):
    """Each worker yields its share (i % num_workers == id) of range(n)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        return iter([tj.tensor(float(i)) for i in range(self.n) if i % nw == wid])


def _flat(batch):
    """A comparable form of a collated batch."""
    if isinstance(batch, tj.Tensor):
        return ("T", batch.dtype.name, batch.numpy().tolist())
    if isinstance(batch, dict):
        return {k: _flat(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_flat(b) for b in batch]
    return batch


def _epochs(loader, n=2):
    return [[_flat(b) for b in loader] for _ in range(n)]


def _init(worker_id):
    np.random.seed(1000 + worker_id)


def test_same_batches_and_order_as_single_process():
    ds = Squares()
    tj.manual_seed(7)
    ref = _epochs(DataLoader(ds, batch_size=4, shuffle=True))
    tj.manual_seed(7)
    got = _epochs(DataLoader(ds, batch_size=4, shuffle=True, num_workers=2))
    assert got == ref and ref[0] != ref[1]                   # two different shuffles, both reproduced
    # TensorDataset's fast path, drop_last, persistent workers reused across epochs.
    x = tj.arange(30).reshape(10, 3)
    td = TensorDataset(x, tj.arange(10))
    tj.manual_seed(3)
    ref = _epochs(DataLoader(td, batch_size=3, shuffle=True, drop_last=True))
    tj.manual_seed(3)
    loader = DataLoader(td, batch_size=3, shuffle=True, drop_last=True, num_workers=3, persistent_workers=True)
    got = _epochs(loader)
    assert got == ref and len(got[0]) == 3
    pids = [w.pid for w in loader._pool.workers]
    assert all(w.is_alive() for w in loader._pool.workers)
    _epochs(loader, 1)
    assert [w.pid for w in loader._pool.workers] == pids     # persistent: the same processes
    workers = loader._pool.workers
    del loader
    gc.collect()
    _wait_dead(workers)


def _wait_dead(workers, limit=10.0):
    end = time.monotonic() + limit
    while any(w.is_alive() for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(w.is_alive() for w in workers)


def test_worker_assignment_seeds_and_init_fn():
    loader = DataLoader(WhoLoads(), batch_size=2, num_workers=2, worker_init_fn=_init)
    batches = [b.numpy() for b in loader]
    assert [int(b[0, 1]) for b in batches] == [k % 2 for k in range(6)]   # batch k on worker k % 2
    np.testing.assert_array_equal(np.concatenate([b[:, 0] for b in batches]), np.arange(12))
    # worker_init_fn ran in each worker: its numpy stream is the one seeded there.
    first = {int(b[0, 1]): int(b[0, 3]) for b in batches[:2]}
    for wid, val in first.items():
        np.random.seed(1000 + wid)
        assert val == np.random.randint(0, 1 << 30)
    assert get_worker_info() is None                                  # main process


def test_worker_error_names_worker_and_shuts_down():
    loader = DataLoader(Fails(), batch_size=2, num_workers=2)
    it = iter(loader)
    assert _flat(next(it)) == ("T", "float32", [0.0, 1.0])
    started = set(mp.active_children())
    assert _flat(next(it)) == ("T", "float32", [2.0, 3.0])
    with pytest.raises(ValueError, match=r"(?s)Caught ValueError in DataLoader worker process 0.*item 5 is broken"):
        next(it)
    assert [_flat(b) for b in it] == [("T", "float32", [6.0, 7.0])]   # the epoch goes on, as PyTorch's
    _wait_dead(started)


def test_early_break_leaves_no_workers():
    before = set(mp.active_children())
    loader = DataLoader(Squares(), batch_size=2, num_workers=2)
    for _ in loader:
        started = set(mp.active_children()) - before
        assert len(started) == 2
        break   # the loop drops the iterator; closing the generator stops the workers
    gc.collect()
    _wait_dead(started)


def test_iterable_dataset_with_workers():
    ref = [b.numpy().tolist() for b in DataLoader(Stream(11), batch_size=2)]
    got = [b.numpy().tolist() for b in DataLoader(Stream(11), batch_size=2, num_workers=2)]
    # Worker copies interleave batch by batch (as PyTorch): w0 [0, 2], w1 [1, 3], w0 [4, 6], ...
    assert got[:2] == [[0.0, 2.0], [1.0, 3.0]]
    assert sorted(x for b in got for x in b) == sorted(x for b in ref for x in b)


def test_persistent_workers_need_workers():
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(Squares(), num_workers=0, persistent_workers=True)


def test_random_split():
    ds = TensorDataset(tj.arange(10))
    tj.manual_seed(0)
    a, b, c = random_split(ds, [0.5, 0.3, 0.2])
    assert (len(a), len(b), len(c)) == (5, 3, 2)
    items = sorted(int(s[i][0].item()) for s in (a, b, c) for i in range(len(s)))
    assert items == list(range(10))
    tj.manual_seed(0)
    a2, _, _ = random_split(ds, [5, 3, 2])
    assert a2.indices == a.indices
    with pytest.raises(ValueError, match="summing to the dataset length 10"):
        random_split(ds, [5, 6])



# ---------------------------------------------------------------- the start method
_SCRIPT = """
import threading
import tracejit as tj
from tracejit.utils.data import DataLoader, TensorDataset
{before}
ds = TensorDataset(tj.arange(20.0).reshape(10, 2))
print("batches", sum(1 for _ in DataLoader(ds, batch_size=2, num_workers=2{kw})))
"""


def _run_script(tmp_path, before="", kw=""):
    """Run an unguarded script (its DataLoader loop at top level, line 7) in a fresh Python:
    (return code, output). The timeout only stops a hang."""
    path = tmp_path / "train.py"
    path.write_text(_SCRIPT.format(before=before, kw=kw))
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=env,
                       cwd=tmp_path)
    return p.returncode, p.stdout + p.stderr, str(path)


def test_unguarded_script_runs_where_fork_is_safe(tmp_path):
    rc, out, _ = _run_script(tmp_path)
    assert rc == 0 and "batches 5" in out, out


@pytest.mark.parametrize("before, kw, why", [
    ("", ', multiprocessing_context="spawn"', "as multiprocessing_context asks"),
    ("threading.Thread(target=threading.Event().wait, name='user-poller', daemon=True).start()", "",
     "thread 'user-poller' is running"),
])
def test_unguarded_script_that_spawn_would_rerun_fails_at_once(tmp_path, before, kw, why):
    rc, out, path = _run_script(tmp_path, before, kw)
    assert rc != 0 and "batches 5" not in out
    assert f"start with 'spawn' here ({why}" in out, out
    assert f'used at {path}:7, outside an `if __name__ == "__main__":` block' in out, out
    assert "bootstrapping" not in out, out          # no worker was started


def _only_main_thread(monkeypatch):
    monkeypatch.setattr(threading, "enumerate", lambda: [threading.main_thread()])


@pytest.mark.parametrize("layer, safe", [("omp", False), ("workqueue", True), ("tbb", True)])
def test_fork_is_refused_while_numba_runs_openmp(monkeypatch, layer, safe):
    _only_main_thread(monkeypatch)
    fake = types.SimpleNamespace(_is_initialized=True, threading_layer=lambda: layer)
    monkeypatch.setitem(sys.modules, "numba.np.ufunc.parallel", fake)
    hazard = data_workers.fork_hazard()
    assert (hazard is None) == safe, hazard
    assert data_workers.start_context().get_start_method() == ("fork" if safe else "spawn")
    if not safe:
        assert "OpenMP" in hazard


def test_tracejit_threads_do_not_stop_fork(monkeypatch):
    """tracejit's own threads (named tracejit-*) are fork-safe: its fork hooks see to them."""
    ours = threading.Thread(name="tracejit-compile-9")
    monkeypatch.setattr(threading, "enumerate", lambda: [threading.main_thread(), ours])
    monkeypatch.setattr(ours, "is_alive", lambda: True)
    monkeypatch.setitem(sys.modules, "numba.np.ufunc.parallel", None)
    assert data_workers.fork_hazard() is None


def test_spawn_runs_from_a_guarded_main():
    """pytest's main module runs under its guard: spawn is allowed and gives the same batches."""
    ds = Squares()
    ref = _epochs(DataLoader(ds, batch_size=4), 1)
    assert _epochs(DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn"), 1) == ref
