"""Values Python code reads during a capture that no tensor argument reaches (a mask built
from sizes, a small boolean tensor a module keeps) are computed at capture instead of the
forward falling back to eager; state read so is guarded, a tensor argument still cannot be
read, and neither can a random draw."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import TraceError


class _RelMask(tj.nn.Module):
    """Transformer-XL's test: a causal mask over memory and segment, applied only when any."""

    def forward(self, x, mlen: int = 0):
        qlen = x.shape[0]
        mask = tj.triu(x.new_ones(qlen, qlen + mlen), diagonal=1 + mlen).byte()[:, :, None].bool()
        scores = x[:, None, :].expand(qlen, qlen + mlen, x.shape[1]).clone()
        if mask is not None and mask.any().item():
            scores = scores.masked_fill(mask, -1e4)
        return scores.softmax(1)


class _Columns(tj.nn.Module):
    """TabNet's embedding generator: a plain boolean tensor attribute iterated in forward."""

    def __init__(self):
        super().__init__()
        self.continuous = tj.tensor([True, False, True])
        self.emb = tj.nn.Embedding(4, 2)

    def forward(self, x):
        cols = []
        for i, is_cont in enumerate(self.continuous):
            cols.append(x[:, i].view(-1, 1) if is_cont else self.emb(x[:, i].long()))
        return tj.cat(cols, 1)


def test_a_mask_from_sizes_is_known_at_capture():
    m = _RelMask()
    f = tj.compile(m, fullgraph=True)
    for q in (3, 1, 4):
        x = tj.randn(q, 5)
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert f.cache_stats()["eager_fallbacks"] == 0


def test_a_small_tensor_of_module_state_is_read_and_guarded():
    m = _Columns()
    f = tj.compile(m, fullgraph=True)
    x = tj.tensor([[0.5, 1.0, 2.0], [1.5, 3.0, 1.0]])
    np.testing.assert_array_equal(f(x).detach().numpy(), m(x).detach().numpy())
    assert f(x).shape == (2, 4)
    m.continuous[2] = False   # changed in place: the next call captures again
    got = f(x)
    assert got.shape == (2, 5)
    np.testing.assert_array_equal(got.detach().numpy(), m(x).detach().numpy())
    st = f.cache_stats()
    assert st["compiles"] == 2 and st["eager_fallbacks"] == 0
    assert any("[True, False, True] -> [True, False, False]" in r for r in st["recompile_reasons"])


def test_values_an_argument_or_a_random_draw_reaches_stay_unknown():
    def on_data(x):
        return x * 2 if x.sum().item() > 0 else x

    def on_random(x):
        return x * 2 if tj.rand(1).item() > 0.5 else x

    for fn in (on_data, on_random):
        with pytest.raises(TraceError, match="needs the value of a traced tensor"):
            tj.compile(fn, fullgraph=True)(tj.ones(3))


def test_a_known_value_of_many_elements_is_no_number():
    def f(x):
        return x + tj.ones(2, 2).sum(0).item()

    with pytest.raises(ValueError, match="a tensor with 2 elements cannot be converted"):
        tj.compile(f, fullgraph=True)(tj.ones(3))


class _Counter(tj.nn.Module):
    """A step counter read before the forward writes it: its guard would fail on every call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("step", tj.zeros((), dtype=tj.int64))

    def forward(self, x):
        y = x * 2 if self.step < 1000 else x
        self.step.add_(1)
        return y


class _RunningMax(tj.nn.Module):
    """A running statistic compared on, then updated with copy_."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rmax", tj.zeros(()))

    def forward(self, x):
        y = x * 0 if self.rmax > 100.0 else x + 1
        with tj.no_grad():
            self.rmax.copy_(tj.maximum(self.rmax, y.abs().max()))
        return y


@pytest.mark.parametrize("cls", [_Counter, _RunningMax])
def test_a_tensor_read_then_written_runs_eagerly_at_once(cls):
    m, ref = cls(), cls()
    f = tj.compile(m)
    with pytest.warns(RuntimeWarning, match="is written by this function"):
        f(tj.ones(3))
    ref(tj.ones(3))
    for i in range(5):
        x = tj.full((3,), 30.0 * i)
        np.testing.assert_array_equal(f(x).numpy(), ref(x).numpy())
    (name, got), = m.named_buffers()
    np.testing.assert_array_equal(got.numpy(), getattr(ref, name).numpy())
    st = f.cache_stats()
    assert st["compiles"] == 0 and st["eager_fallbacks"] == 1 and not st["recompile_reasons"]


class _Pointer(tj.nn.Module):
    """MoCo's queue pointer: read itself with int(), written, cycling through three values."""

    def __init__(self):
        super().__init__()
        self.register_buffer("ptr", tj.zeros(1, dtype=tj.int64))

    def forward(self, x):
        p = int(self.ptr)
        self.ptr[0] = (p + 1) % 3
        return x * (p + 1)


def test_a_tensor_read_itself_then_written_keeps_an_entry_per_value():
    m = _Pointer()
    f = tj.compile(m, fullgraph=True)
    for i in range(7):
        np.testing.assert_array_equal(f(tj.ones(2)).numpy(), [i % 3 + 1.0] * 2)
    assert int(m.ptr) == 1
    st = f.cache_stats()
    assert st["compiles"] == 3 and st["eager_fallbacks"] == 0


def test_a_known_value_has_eager_dtype_and_rounding():
    w, seen = tj.tensor([0.1, 0.2, 0.7]), np.empty(2, object)   # float32 state read in Python

    def f(x):
        seen[int(seen[0] is not None)] = {"item": (w * 0.1).sum().item(), "arrays": ((w * 3).numpy(),
                                                                         (w.int() + 1).numpy())}
        return x * 2

    f(tj.ones(2))
    tj.compile(f, fullgraph=True)(tj.ones(2))
    want, got = seen
    assert got["item"] == want["item"]
    for g, r in zip(got["arrays"], want["arrays"]):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g, r)


def test_a_value_that_is_not_known_leaves_the_sizes_it_read_symbolic():
    # the mask from sizes is known but its & with the data is not: nonzero's count is the
    # data's, and n stays symbolic
    def f(x):
        n = x.shape[0]
        mask = (tj.arange(n * n).reshape(n, n) % (n + 1) != 0) & (x @ x.t() > 0)
        return mask.nonzero()

    cf = tj.trace(f, compiler="interpret")
    rng = np.random.default_rng(0)
    for n in (3, 4, 6, 5):
        x = tj.tensor(rng.standard_normal((n, 2)).astype(np.float32))
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("x", 0)]
