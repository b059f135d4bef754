"""A main script without an ``if __name__ == "__main__":`` guard that loads a large dataset
with workers (the layout of many PyTorch programs) finishes with the right batches and
one op thread per worker, rather than hanging while a spawned worker dies re-running it; a
dataset that a spawn start cannot pickle gets an error saying why it is pickled."""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


def test_unguarded_script_loads_a_large_dataset(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import tracejit as torch
        from tracejit.utils.data import DataLoader, TensorDataset

        data = torch.arange(4 * 200_000, dtype=torch.float64).reshape(200_000, 4)   # ~8 MB pickled
        loader = DataLoader(TensorDataset(data, torch.arange(200_000)), batch_size=50_000, num_workers=3)

        def train():
            total = 0.0
            for x, y in loader:
                total += float(x[:, 0].sum()) + float(y.sum())
            return total

        print("TOTAL", train(), train())
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=REPO), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    expect = float(sum(4 * i for i in range(200_000)) + sum(range(200_000)))
    assert f"TOTAL {expect} {expect}" in out.stdout


def test_a_queue_feeder_thread_does_not_stop_forking():
    # A finished pool's queues can still be flushing on their feeder threads when the next
    # epoch starts its workers: that must not turn the start method to spawn.
    import multiprocessing as mp

    from tracejit.utils.data import _workers
    q = mp.get_context("fork").Queue()
    q.put(b"x" * 100)        # starts the queue's feeder thread
    try:
        hazard = _workers.fork_hazard()
        assert hazard is None or "QueueFeederThread" not in hazard
    finally:
        q.get()
        q.close()
        q.join_thread()


class _HoldsALambda:
    def __init__(self):
        self.f = lambda i: i

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.f(i)


def test_a_dataset_spawn_cannot_pickle_gets_an_error_saying_why():
    import multiprocessing as mp

    from tracejit.utils.data import DataLoader
    before = set(mp.active_children())
    loader = DataLoader(_HoldsALambda(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    with pytest.raises(AttributeError, match=r"(?s)start with 'spawn' here \(as multiprocessing_context asks\), "
                                             r"which pickles the dataset.*local object.*at module level"):
        next(iter(loader))
    assert not set(mp.active_children()) - before   # (earlier tests' workers may end meanwhile)


def test_a_thread_begun_outside_threading_does_not_make_workers_spawn():
    """A "Dummy-N" entry (a thread started outside `threading` that ran Python) stays listed
    after its thread ends; it must not count as a running thread, or every later loader
    would spawn and refuse datasets holding lambdas, where PyTorch's forks."""
    import _thread
    import threading
    from tracejit.utils.data import _workers

    done = threading.Event()
    _thread.start_new_thread(lambda: (threading.current_thread(), done.set()), ())
    assert done.wait(10)
    dummies = [t.name for t in threading.enumerate() if isinstance(t, threading._DummyThread)]
    assert dummies
    reason = _workers.fork_hazard() or ""
    assert not any(name in reason for name in dummies)
