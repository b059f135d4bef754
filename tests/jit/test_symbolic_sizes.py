"""Symbolic sizes in the tracer: sizes used as numbers, slices bounded by sizes, and
gradients that need a size's value (those dims are captured static instead)."""
from __future__ import annotations

import numpy as np
import pytest

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


def test_float_arithmetic_on_sizes_is_a_traced_number(compiler, monkeypatch):
    """A size times, plus or minus a float, or to a fractional power (an attention's
    ``d ** -0.5``, DINO's ``(w // p + 0.1) / 4``) is computed from each call's sizes; a
    natural power of a size stays a size."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(x):
        n = x.shape[0]
        return x * (n ** -0.5) + (n // 2 + 0.1) / 4 - (1.5 - n * 0.25) + x.new_zeros(n ** 2).sum()

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    for b in (4, 5, 8, 11):   # (n // 2 >= 2)
        x = tj.randn(b, 3)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


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


def test_a_broadcast_dim_grown_from_one_goes_symbolic_with_its_partner():
    # (a grew from 1 while b kept its size: broadcast against b's static dim it is static for
    # that capture; when both change they share one symbol, not stay static for good)
    def f(a, b):
        return (a * 2 + b).sum(0)
    cf = tj.trace(f, compiler="interpret")
    for n, m in ((1, 3), (3, 3), (5, 5), (7, 7), (9, 9)):
        a, b = tj.randn(n, 4), tj.randn(m, 4)
        np.testing.assert_allclose(cf(a, b).numpy(), f(a, b).numpy(), rtol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 3 and {("a", 0), ("b", 0)} <= set(st["dynamic_dims"]), st["recompile_reasons"]


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


def test_chunks_of_a_symbolic_size_recapture_only_for_another_count(compiler, monkeypatch):
    """chunk(c) of a symbolic dim: pieces of ceil(n / c), guarded on their count (4 chunks
    of 6 are three pieces) and on a last piece of 1; gradients flow to every piece."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(x):
        return sum(((p * (i + 1)).square().sum() for i, p in enumerate(x.chunk(4, 1))), tj.zeros(()))

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    for n, compiles in ((8, 1), (11, 1), (12, 1), (16, 1), (6, 2), (13, 3)):
        x = tj.randn(2, n, requires_grad=True)
        xe = x.detach().requires_grad_()
        out, want = cf(x), f(xe)
        out.backward()
        want.backward()
        np.testing.assert_allclose(out.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5)
        assert cf.cache_stats()["compiles"] == compiles, (n, cf.cache_stats()["recompile_reasons"])


def test_a_roll_by_a_symbolic_shift_is_one_capture(compiler, monkeypatch):
    """roll by a shift computed from the sizes (an fftshift's n // 2, or minus it) within
    one turn: guarded on that range, not specialized per size."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(x):
        return tj.roll(x, (x.shape[0] // 2, -(x.shape[1] // 3)), (0, 1)) * tj.arange(x.shape[1])

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    for n in (6, 7, 9, 12):
        x = tj.randn(n, n + 1)
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_aranges_with_a_step_over_a_symbolic_span_are_one_capture(compiler, monkeypatch):
    """arange(n - 1, -1, -1) (a reversal's indices) and arange(1, n, 2): ceil(span / step)
    elements, a size computed from each call's n."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(x):
        n = x.shape[1]
        return x[:, tj.arange(n - 1, -1, -1)].sum(0) + x[:, tj.arange(1, n, 2)].sum() * tj.arange(n, 0, -3).sum()

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    for n in (6, 7, 9, 12):
        x = tj.randn(3, n)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-5)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_topk_of_a_symbolic_count_is_one_capture(compiler, monkeypatch):
    """topk(n // 2): k a size computed from each call's n, values, indices and gradient."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(x):
        v, i = x.topk(x.shape[1] // 2, dim=1)
        return v.square().sum() + i.sum()

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    for n in (6, 7, 9, 12):
        x = tj.randn(3, n, requires_grad=True)
        xe = x.detach().requires_grad_()
        out, want = cf(x), f(xe)
        out.backward()
        want.backward()
        np.testing.assert_allclose(out.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_a_symbolic_size_as_a_fill_value_is_an_integer():
    """full(shape, n) and where(c, n, 0) of a symbolic n hold int64, as of a Python int."""
    def f(x):
        n = x.shape[0]
        return tj.full((2,), n), tj.where(x > 0, n, 0), x.flatten().gather(0, tj.full((1,), n - 1))

    cf = tj.trace(f, dynamic=True, compiler="interpret")
    for n in (3, 5, 7):
        x = tj.randn(n)
        for got, want in zip(cf(x), f(x)):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_a_quotient_below_two_is_a_size_from_zero(monkeypatch):
    """``n // 3`` of 1 (n from 3 to 5) is a symbol from 0 up, as a remainder: one entry serves
    quotients of 1 and more; where one of 1 broadcasts, it is this call's constant."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")

    def f(x):
        k = x.shape[0] // 3
        return x.roll(k, 0)[:k] * 2 + x[: x.shape[0] // 4].sum()

    cf = tj.trace(f, dynamic=True)
    for n in (4, 5, 7, 13, 16):
        x = tj.randn(n, 3)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 1, st["recompile_reasons"]
    cf(tj.randn(1, 3))   # (a dim of 1 is specialized)
    assert cf.cache_stats()["compiles"] == 2

    def g(x, y):
        return x[: x.shape[0] // 4] * y

    cg = tj.trace(g, dynamic=True)
    y = tj.randn(5, 3)
    for n in (4, 6, 20, 22, 7):   # one row broadcasts, 5 rows match
        x = tj.randn(n, 3)
        np.testing.assert_allclose(cg(x, y).numpy(), g(x, y).numpy(), rtol=1e-6)
    assert cg.cache_stats()["compiles"] == 2, cg.cache_stats()["recompile_reasons"]


def test_repeat_interleave_by_a_count_from_sizes_stays_symbolic(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")

    def f(x):
        return x.repeat_interleave(x.shape[0] // 2, dim=0) + x.repeat_interleave(2, dim=1).sum()

    cf = tj.trace(f, dynamic=True)
    for n in (4, 5, 9):
        x = tj.randn(n, 3)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_interpolate_by_a_non_dyadic_scale_keeps_sizes_symbolic(monkeypatch):
    """``floor(h * 0.6)`` in float64 is ``h * 3 // 5`` for every h below 2^16, guarded."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    torch = pytest.importorskip("torch")

    def f(F, x):
        return F.interpolate(x, scale_factor=0.6, mode="bilinear")

    cf = tj.trace(lambda x: f(tj.nn.functional, x), dynamic=True)
    for n in (5, 8, 11):
        a = np.random.default_rng(n).standard_normal((1, 2, n, n + 1)).astype(np.float32)
        want = f(torch.nn.functional, torch.from_numpy(a)).numpy()
        np.testing.assert_allclose(cf(tj.tensor(a)).numpy(), want, rtol=1e-5, atol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_the_recompile_limit_warning_names_the_size_code_needed():
    def f(x):
        return x * int(x.shape[0])

    cf = tj.trace(f, recompile_limit=2, compiler="interpret")
    with pytest.warns(RuntimeWarning, match="hit the recompile limit") as w:
        for n in (2, 3, 4):
            cf(tj.ones(n))
    text = str(w[0].message)
    assert "Last reason: input 'x': size guard failed: dim 0 was 3, now 4 (kept static: its value was needed" in text
    assert "dynamic=True" not in text   # (it would not help: the code needs the value)


def test_a_remainder_of_sizes_is_symbolic_and_its_zero_is_guarded(monkeypatch):
    """``n % 8`` is a symbol from 0 up: padding to a multiple of 8 serves every n in one
    entry, and ``n % 4 == 0`` in the code is this call's answer, guarded."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    F = tj.nn.functional

    def f(x):
        n = x.shape[-1]
        y = F.pad(x, (0, (8 - n % 8) % 8)).view(x.shape[0], -1, 8).sum(-1)
        return y * 2 if n % 4 == 0 else y

    cf = tj.trace(f, dynamic=True)
    for n in (17, 19, 22, 30):
        x = tj.randn(2, n)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]
    for n in (20, 24, 27, 28):   # n % 4 == 0 (20, 24, 28): the other side, one more entry
        x = tj.randn(2, n)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]


def test_a_remainder_below_two_in_a_condition_is_this_calls_answer():
    """``if n % 4`` and ``n % 4 == 1`` where ``n // 4`` is a guarded 0 or 1 (the remainder
    ``n - 4``): each call's truth, as eagerly, for remainders 0 and 1 too."""
    def f(x):
        r = x.shape[0] % 4
        return x.sum() * (2 if r else 3) * (5 if r == 1 else 7)

    cf = tj.trace(f, dynamic=True, compiler="interpret")
    for n in (4, 5, 6, 8, 9, 12, 2, 3, 5, 4):
        x = tj.ones(n)
        assert cf(x).item() == f(x).item() == n * (2 if n % 4 else 3) * (5 if n % 4 == 1 else 7), n


def test_the_truth_of_a_count_from_the_data_is_each_calls():
    def f(x):
        return x.sum() * (2 if (x > 0).nonzero().shape[0] else 3)

    cf = tj.compile(f, backend="interpret")
    with pytest.warns(RuntimeWarning, match="a size that depends on the data"):   # (read: eager)
        for v in ([1.0, -1.0], [-1.0, -2.0], [1.0, 1.0], [-3.0, -1.0]):
            x = tj.tensor(v)
            assert cf(x).item() == f(x).item() == sum(v) * (2 if max(v) > 0 else 3)


def test_a_slice_past_the_least_size_is_guarded():
    # (x[3:] of a dim of 2 is empty; a remainder's n % 4 may be 0)
    def f(x, n):
        a, b = x[3:], x[:n % 4][1:]
        return a.sum(0) + a.shape[0] + b.sum(0) * b.shape[0]
    cf = tj.compile(f, dynamic=True)
    for rows, n in ((5, 6), (6, 7), (2, 4), (3, 8), (7, 9)):
        x = tj.tensor(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2))
        np.testing.assert_allclose(cf(x, n).numpy(), f(x, n).numpy(), err_msg=f"{rows}, {n}")


def test_a_remainder_of_one_is_not_taken_for_a_broadcast_one():
    # (captured where h % 4 + 1 is 1, as the condition's dim: the kernel must not fuse them flat)
    def f(x):
        return tj.where(x[:1] > 0, x[:x.shape[0] % 4 + 1], 0.0)
    cf = tj.compile(f, dynamic=True)
    for n in (8, 9, 10, 12, 13):
        x = tj.randn(n, 3)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), err_msg=f"{n}")
