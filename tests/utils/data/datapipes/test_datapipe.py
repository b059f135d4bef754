"""DataPipes against PyTorch's: functional chains of the built-in iterable and map-style
pipes, a pipe registered by ``functional_datapipe``, the validation decorators and
``non_deterministic``, and ``_DatasetKind``'s fetchers."""
import warnings
from typing import Iterator

import pytest

import tracejit.utils.data as tjd

torch = pytest.importorskip("torch")
import torch.utils.data as ptd  # noqa: E402

warnings.filterwarnings("ignore", message="Lambda function is not supported by pickle")


def _mods(d):
    from importlib import import_module
    base = d.__name__ + ".datapipes"
    return import_module(base + ".iter"), import_module(base + ".map")


def _plain(x):
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x.tolist() if hasattr(x, "tolist") else x


def _double(x):
    return x * 2


def _not_three(x):
    return x % 3 != 0


def _chains(d):
    it, mp = _mods(d)
    w = it.IterableWrapper
    m = mp.SequenceWrapper(range(5)).map(_double)
    return [list(w(range(10)).map(_double).filter(_not_three).batch(3)),
            len(w(range(10)).batch(3)), len(w(range(10)).batch(3, drop_last=True)),
            list(w([[1, 2], [3]]).unbatch()), list(w(range(3)).zip(w("abc"))),
            list(w(range(3)).concat(w(range(2)))), _plain(list(w([(1, 2), (3, 4)]).collate())),
            list(w([(1, "a"), (2, "b")]).map(_double, input_col=0)),
            len(m), m[2], list(m.batch(2)), len(m.batch(2)), list(m.concat(mp.SequenceWrapper([7]))),
            list(m.zip(mp.SequenceWrapper("abcde"))), sorted(mp.SequenceWrapper(range(5)).shuffle()),
            sorted(w(range(20)).shuffle(buffer_size=4)), d.DataChunk([1, 2]).as_str(),
            type(next(iter(w(range(4)).batch(2)))).__name__]


def test_functional_chains_give_pytorchs_items():
    assert _chains(tjd) == _chains(ptd)


def _registered(d, name):
    @d.functional_datapipe(name)
    class Repeat(d.IterDataPipe[int]):
        def __init__(self, source, times: int):
            self.source, self.times = source, times

        def __iter__(self) -> Iterator[int]:
            for x in self.source:
                yield from [x] * self.times
    it, _ = _mods(d)
    return list(it.IterableWrapper([1, 2]).repeat_items_for_test(2)) if name == "repeat_items_for_test" else None


def test_functional_datapipe_registers_a_method():
    assert _registered(tjd, "repeat_items_for_test") == [1, 1, 2, 2]
    with pytest.raises(Exception, match="already taken"):
        tjd.functional_datapipe("repeat_items_for_test")(type("Again", (tjd.IterDataPipe,), {}))


def test_validation_and_determinism():
    # (PyTorch's own runtime_validation needs its typing metaclass's ``type``; the checks
    # are those its documentation gives)
    d = tjd

    class Ints(d.IterDataPipe[int]):
        def __init__(self, items):
            self.items = items

        @d.runtime_validation
        def __iter__(self) -> Iterator[int]:
            yield from self.items

    assert list(Ints([1, 2])) == [1, 2]
    with pytest.raises(RuntimeError, match="Expected an instance as subtype"):
        list(Ints([1, "x"]))
    with d.runtime_validation_disabled():
        assert list(Ints([1, "x"])) == [1, "x"]

    class Takes(d.IterDataPipe):
        @d.argument_validation
        def __init__(self, dp: d.IterDataPipe[int]):
            self.dp = dp

    Takes(Ints([1]))
    with pytest.raises(TypeError):
        Takes([1, 2])

    @d.non_deterministic
    class Random(d.IterDataPipe):
        def __init__(self):
            pass

    Random()
    with d.guaranteed_datapipes_determinism():
        with pytest.raises(TypeError, match="non-deterministic"):
            Random()


@pytest.mark.parametrize("d", [tjd, ptd], ids=["tracejit", "torch"])
def test_dataset_kind_fetchers(d):
    m = torch if d is ptd else __import__("tracejit")
    ds = d.TensorDataset(m.arange(5))
    f = d._DatasetKind.create_fetcher(d._DatasetKind.Map, ds, True, d.default_collate, False)
    assert _plain(f.fetch([0, 2])) == [[0, 2]]
    it, _ = _mods(d)
    g = d._DatasetKind.create_fetcher(d._DatasetKind.Iterable, it.IterableWrapper(range(5)), True,
                                      d.default_collate, True)
    assert _plain(g.fetch([0, 1])) == [0, 1] and _plain(g.fetch([0, 1])) == [2, 3]
    with pytest.raises(StopIteration):
        g.fetch([0, 1])   # one item left, dropped (drop_last)
