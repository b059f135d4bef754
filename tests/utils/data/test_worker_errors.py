"""An exception in a DataLoader worker reaches the loop as PyTorch's does: the same type (so
``except ValueError`` around the loop still works), naming the worker and carrying the
worker's traceback text; RuntimeError where the type cannot be rebuilt from a message. A
batch that cannot be pickled back raises too, rather than leaving the loop waiting."""
import threading

import pytest

import tracejit as tj
from tracejit.utils.data import DataLoader, Dataset

pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


class Broken(Dataset):
    """Item 3 raises the exception `make` builds."""

    def __init__(self, make):
        self.make = make

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 3:
            raise self.make()
        return tj.tensor(float(i))


def _error(make, **kw):
    # (fork named: a thread another test left running would make the loader spawn, which
    # cannot send these datasets' lambdas and local classes)
    kw.setdefault("multiprocessing_context", "fork")
    loader = DataLoader(Broken(make), batch_size=1, num_workers=2, **kw)
    with pytest.raises(BaseException) as info:
        list(loader)
    return info.value


def test_the_workers_exception_type_message_and_traceback():
    err = _error(lambda: ValueError("item 3 is broken"))
    assert type(err) is ValueError
    text = str(err)
    assert text.startswith("Caught ValueError in DataLoader worker process 1.\nOriginal Traceback")
    assert "raise self.make()" in text and text.rstrip().endswith("ValueError: item 3 is broken")


def test_a_key_error_shows_its_traceback_lines():
    err = _error(lambda: KeyError("label"))
    assert type(err) is KeyError
    assert str(err).startswith("Caught KeyError in DataLoader worker process 1.\nOriginal Traceback")


def test_an_exception_that_cannot_be_rebuilt_becomes_runtime_error():
    class Local(Exception):   # defined in a function: its class cannot travel between processes
        pass
    for make, name in ((lambda: TwoArgError(1, 2), "TwoArgError"), (Local, "Local")):
        err = _error(make)
        assert type(err) is RuntimeError
        assert str(err).startswith(f"Caught {name} in DataLoader worker process 1.")


def _bad_init(worker_id):
    raise OSError(f"no data for worker {worker_id}")


def test_an_error_in_worker_init_fn():
    loader = DataLoader(Broken(ValueError), batch_size=1, num_workers=1, worker_init_fn=_bad_init,
                        multiprocessing_context="fork")
    with pytest.raises(OSError, match=r"(?s)Caught OSError in DataLoader worker process 0\..*no data for worker 0"):
        list(loader)


class Unsendable(Dataset):
    def __len__(self):
        return 3

    def __getitem__(self, i):
        return threading.Lock()   # loads fine, but cannot be pickled back to the main process


def test_a_batch_that_cannot_be_sent_back_raises_instead_of_hanging():
    # (timeout only turns a hang into a failure of this test; the error comes at once)
    loader = DataLoader(Unsendable(), batch_size=None, num_workers=1, timeout=30, multiprocessing_context="fork")
    with pytest.raises(TypeError, match=r"(?s)Caught TypeError in DataLoader worker process 0\..*"
                                        r"could not be pickled to send it to the main process: cannot pickle"):
        next(iter(loader))
