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
