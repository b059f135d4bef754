"""``iter(DataLoader)`` and the loader's argument checks, against PyTorch: the iterator
knows the loader's length and warns when a stream yields past it; prefetch_factor without
workers (or under 1) and a negative timeout raise."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kw", [{"batch_size": 2}, {"batch_size": 2, "drop_last": True}, {"batch_size": None}])
def test_loader_iterator_has_the_loaders_length_as_torch(kw):
    got = []
    for m in (torch, tj):
        it = iter(m.utils.data.DataLoader(m.utils.data.TensorDataset(m.arange(5.0)), **kw))
        first = next(it)
        got.append((len(it), first[0].tolist(), [b[0].tolist() for b in it], iter(it) is it))
    assert got[1] == got[0]


@pytest.mark.parametrize("kw,match", [({"prefetch_factor": 2}, "prefetch_factor"), ({"timeout": -1}, "timeout")])
def test_loader_refuses_what_torch_refuses(kw, match):
    for m in (torch, tj):
        with pytest.raises(ValueError, match=match):
            m.utils.data.DataLoader(m.utils.data.TensorDataset(m.arange(5.0)), **kw)


@pytest.mark.parametrize("factor", [0, -1, 1.5])
def test_a_prefetch_factor_that_loads_nothing_is_refused(factor):
    # (PyTorch refuses a negative factor in the constructor and 0 at iter(); here both at once)
    with pytest.raises(ValueError, match=r"prefetch_factor option should be a positive int, got"):
        tj.utils.data.DataLoader(tj.utils.data.TensorDataset(tj.arange(5.0)), num_workers=1, prefetch_factor=factor)


def _short_stream(m):
    class Stream(m.utils.data.IterableDataset):
        """Says it holds 2 samples and yields 4."""

        def __iter__(self):
            return iter(range(4))

        def __len__(self):
            return 2
    return Stream()


@pytest.mark.parametrize("batch_size", [None, 1, 2])
def test_a_stream_longer_than_its_length_warns_as_torch(batch_size):
    import warnings
    got = []
    for m in (torch, tj):
        loader = m.utils.data.DataLoader(_short_stream(m), batch_size=batch_size)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            before = len(list(loader))            # no len() asked yet: no warning
            n = len(loader)
            after = len(list(loader))
        fetched = [str(w.message).split("but ")[1].split(" samples")[0] for w in caught
                   if "was reported to be 2" in str(w.message)]
        got.append((before, n, after, fetched))
    assert got[1] == got[0]


@pytest.mark.parametrize("kw,error", [({"num_workers": 1, "multiprocessing_context": "bogus"}, ValueError),
                                      ({"num_workers": 1, "multiprocessing_context": 3}, TypeError),
                                      ({"num_workers": 0, "multiprocessing_context": "spawn"}, ValueError)])
def test_a_bad_multiprocessing_context_is_refused_at_once_as_torch(kw, error):
    for m in (torch, tj):
        with pytest.raises(error, match="multiprocessing_context"):
            m.utils.data.DataLoader(m.utils.data.TensorDataset(m.arange(5.0)), **kw)


@pytest.mark.parametrize("kw", [{}, {"num_workers": 2}, {"num_workers": 2, "prefetch_factor": 3, "timeout": 2.5,
                                                         "pin_memory_device": "cpu", "in_order": False}])
def test_loader_options_read_back_as_torch(kw):
    names = ("num_workers", "prefetch_factor", "timeout", "persistent_workers", "pin_memory", "pin_memory_device",
             "in_order", "generator", "worker_init_fn", "multiprocessing_context", "drop_last", "batch_size")
    got = [[getattr(m.utils.data.DataLoader(list(range(4)), **kw), n) for n in names] for m in (torch, tj)]
    assert got[1] == got[0]
