"""A compiled function's cache (jit/function.py): an entry whose first call failed is not
kept, so the next call captures again, meets the same error, and the counters show no
entry."""
import pytest

import tracejit as tj


def test_an_entry_whose_first_run_failed_is_dropped():
    g = tj.compile(lambda a, idx: a.gather(0, idx))
    for _ in range(2):
        with pytest.raises(IndexError, match="index 5 is out of range"):
            g(tj.ones(3), tj.tensor([0, 5]))
        assert g.entries == [] and g.cache_stats()["compiles"] == 0
        assert g.entry_for(tj.ones(3), tj.tensor([0, 5])) is None
    assert g(tj.ones(3), tj.tensor([0, 1])).tolist() == [1.0, 1.0]
    assert len(g.entries) == 1 and g.cache_stats()["compiles"] == 1


def test_a_failed_capture_keeps_nothing_and_raises_again():
    f = tj.compile(lambda a: a.t().view(-1))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="view"):
            f(tj.ones(2, 3))
        assert f.entries == [] and f.cache_stats()["compiles"] == 0
    assert f(tj.ones(3, 1)).tolist() == [1.0, 1.0, 1.0]


def test_calls_after_a_graph_break_count_as_eager_calls_not_misses():
    class Counted(tj.nn.Module):   # appends to a list each call: cannot be one graph
        def __init__(self):
            super().__init__()
            self.lin = tj.nn.Linear(3, 2)
            self.seen = []

        def forward(self, x):
            self.seen.append(x.shape[0])
            return self.lin(x).tanh()

    m = Counted()
    c = tj.compile(m)
    x = tj.ones(4, 3)
    with pytest.warns(RuntimeWarning, match="cannot be captured as one graph"):
        c(x)
    for _ in range(4):
        c(x)
    st = c.cache_stats()
    assert m.seen == [4] * 5
    assert st["misses"] == 1 and st["eager_calls"] == 4 and st["compiles"] == 0
    assert st["eager_fallbacks"] == 1


def test_keywords_and_defaults_bind_as_python_does():
    def f(x, past=None, scale=2.0):
        return x * scale if past is None else x * scale + past[0] - past[1]
    g = tj.compile(f)
    x = tj.tensor([1.0, 2.0])
    past = [tj.tensor([3.0, 4.0]), tj.tensor([0.5, 0.25])]
    for _ in range(2):   # the capture's call, then the hits
        assert g(x).tolist() == [2.0, 4.0]
        assert g(x, past=past).tolist() == [4.5, 7.75]
        assert g(scale=3.0, x=x, past=past).tolist() == [5.5, 9.75]
        assert g(x, past, 1.0).tolist() == [3.5, 5.75]
    for args, kwargs, message in [((x,), {"pats": past}, "unexpected keyword argument 'pats'"),
                                  ((x,), {"x": x}, "multiple values for argument 'x'"),
                                  ((), {"past": past}, "missing 1 required positional argument: 'x'"),
                                  ((x, past, 1.0, 2), {}, "takes from 1 to 3 positional arguments")]:
        with pytest.raises(TypeError, match=message):
            g(*args, **kwargs)
