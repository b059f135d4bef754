"""Symbolic sizes in the tracer: sizes used as numbers, slices bounded by sizes, and
gradients that need a size's value (those dims are captured static instead)."""
from __future__ import annotations

import numpy as np

import tracejit as tj


def test_a_ratio_of_sizes_is_a_traced_number(compiler):
    def f(x):
        n = x.shape[0]
        return x.sum(0) * (n / (n - 1))   # BatchNorm's unbiased variance factor

    cf = tj.trace(f, compiler=compiler)
    for b in (2, 3, 5, 8):
        x = tj.randn(b, 3)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("x", 0)]


def test_a_ratio_of_sizes_needed_as_a_python_number_keeps_the_dim_static():
    def f(x):
        if x.shape[0] / 4 > 1:      # a Python branch on the ratio: needs the size
            return x * 2
        return x

    cf = tj.trace(f, compiler="interpret")
    assert [cf(tj.ones(n))[0].item() for n in (2, 3, 5, 6)] == [1.0, 1.0, 2.0, 2.0]
    st = cf.cache_stats()
    assert st["compiles"] == 4 and st["dynamic_dims"] == []


def test_a_slice_bounded_by_a_size_keeps_it_symbolic(compiler):
    def f(x, k):
        flat = x.reshape(-1)
        return flat[flat.shape[0] - 3:] + flat[:x.shape[0]].sum() + k.sum()

    cf = tj.trace(f, compiler=compiler)
    for b in (2, 3, 5, 8):
        x, k = tj.randn(b, 4), tj.randn(3)
        np.testing.assert_allclose(cf(x, k).numpy(), f(x, k).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 2


class _SizedBackward(tj.autograd.Function):
    """A backward that reads the batch size as a Python int."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        n = int(g.shape[0])
        return g * 2 + tj.zeros(n, g.shape[1])


def test_a_gradient_that_needs_a_size_recaptures_it_static():
    def f(x):
        return _SizedBackward.apply(x).sum()

    cf = tj.trace(f, compiler="numba")
    for b in (2, 3, 5, 8):
        x = tj.randn(b, 4, requires_grad=True)
        cf(x).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full((b, 4), 2.0, np.float32))
    st = cf.cache_stats()
    assert st["dynamic_dims"] == [] and st["eager_fallbacks"] == 0
    assert all(isinstance(d, int) for e in cf.entries for d in e.descs[0].shape)
    assert st["compiles"] == 4 and st["tiers"] == ["compiled"] * 4


def test_a_symbolic_capture_that_fails_is_not_tried_again():
    seen = []

    def g(x):
        seen.append(type(x.shape[0]).__name__)
        if not isinstance(x.shape[0], int):
            raise ValueError("symbolic sizes refused")
        return x * 2

    cf = tj.trace(g, compiler="interpret")
    for b in (2, 3, 4, 5):
        assert cf(tj.ones(b, 3)).shape == (b, 3)
    # the second call tries symbolic once and captures static; later calls never try again
    assert seen == ["int", "Sym", "int", "int", "int"]
    assert cf.cache_stats()["dynamic_dims"] == []


def test_a_returned_size_is_the_calls_not_the_first_captures():
    cf = tj.trace(lambda x: (x.sum(), x.shape, x.size(0)), compiler="interpret")
    for b in (2, 3, 4, 5):
        _, shape, n = cf(tj.ones(b, 3))
        assert tuple(shape) == (b, 3) and n == b and type(n) is int


def test_a_dim_goes_symbolic_when_another_argument_changed_too():
    # (a prefill with labels, then without at another batch: torch.compile's automatic
    # dynamic marks the batch dim by the argument's name, whatever else changed)
    def f(x, past=None):
        return x * 2 if past is None else tj.cat([past, x], 1).sum(1)
    cf = tj.trace(f, compiler="interpret")
    calls = [(tj.randn(4, 3), tj.randn(4, 2)), (tj.randn(2, 3), None), (tj.randn(5, 3), None),
             (tj.randn(3, 3), tj.randn(3, 2)), (tj.randn(6, 3), tj.randn(6, 2))]
    for x, past in calls:
        np.testing.assert_allclose(cf(x, past).numpy(), f(x, past).numpy(), rtol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 3, st["recompile_reasons"]
    assert ("x", 0) in st["dynamic_dims"] and ("past", 0) in st["dynamic_dims"]


def test_a_cache_grown_from_one_goes_symbolic_at_two():
    # (a decoder's first cached step holds one token: torch.compile's automatic dynamic
    # makes the length symbolic at the second, as at any other change but to 0 or 1)
    def step(cache, x):
        return tj.cat([cache, x], 1).softmax(1)
    cf = tj.trace(step, compiler="interpret")
    for n in range(1, 6):
        cache, x = tj.randn(2, n), tj.randn(2, 1)
        np.testing.assert_allclose(cf(cache, x).numpy(), step(cache, x).numpy(), rtol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 2 and ("cache", 1) in st["dynamic_dims"], st["recompile_reasons"]


def test_a_radius_graph_keeps_the_node_count_symbolic():
    # (DimeNet's: no self loops by fill_diagonal_, in-degrees by bincount(minlength=n))
    def f(pos):
        adj = tj.cdist(pos, pos) < 1.5
        adj.fill_diagonal_(False)
        j, i = adj.nonzero().t()
        return tj.bincount(i, minlength=pos.shape[0]), j

    cf = tj.trace(f, compiler="interpret")
    rng = np.random.default_rng(0)
    for n in (4, 5, 7, 3):
        pos = tj.tensor(rng.standard_normal((n, 3)).astype(np.float32))
        for got, want in zip(cf(pos), f(pos)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("pos", 0)]
