"""Int arguments used as slice bounds: symbolic sizes once they change, guarded on the
range the capture's shape reasoning assumed (jit/size_args.py)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import tracejit as tj


def _sweep(cf, x, values, ref):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # no recompile-limit fallback
        for n in values:
            np.testing.assert_allclose(np.asarray(cf(x, n).numpy()), ref(x.numpy(), n), rtol=1e-5,
                                       atol=1e-6, err_msg=f"n={n}")


def test_a_slice_bound_argument_becomes_a_symbolic_size(compiler):
    x = tj.randn(20, 3)
    cf = tj.trace(lambda x, n: x[:n].sum(0), compiler=compiler)
    _sweep(cf, x, range(1, 11), lambda a, n: a[:n].sum(0))
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["eager_fallbacks"] == 0
    assert "i0" in str(cf.entries[1].opt_graph)


def test_tj_compile_slice_storm_captures_twice():
    x = tj.randn(30)
    f = tj.compile(lambda x, n: x[:n].sum())
    _sweep(f, x, range(1, 11), lambda a, n: a[:n].sum())
    assert f.cache_stats()["compiles"] == 2


def test_bounds_past_the_dim_share_one_entry():
    x = tj.randn(6, 2)
    cf = tj.trace(lambda x, n: x[:n] * 2.0, compiler="interpret")
    values = [2, 3, 4, 9, 12, 5, 6, 1, 0]
    _sweep(cf, x, values, lambda a, n: a[:n] * 2.0)
    st = cf.cache_stats()
    # 2 (const), 3.. symbolic (guarded 2 <= n <= 6); 9 past the dim: clamped, guarded
    # n >= 6, so 12 hits it; 5, 6 hit the first symbolic entry; 1 and 0 each get one
    assert st["compiles"] == 5, st["recompile_reasons"]
    assert any(r.endswith("took a symbolic size for n <= 6, which no longer holds")
               for r in st["recompile_reasons"])


@pytest.mark.parametrize("grad", [False, True])
def test_slices_and_pads_clamped_by_a_size_do_not_recompile_per_value(grad):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def run(fn, tfn, arrays, *extra):
        cf = tj.compile(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no recompile-limit fallback
            for a, e in zip(arrays, extra or [()] * len(arrays)):
                x, t = tj.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)
                y, ty = cf(x, *e), tfn(t, *e)
                np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6)
                if grad:
                    (y * y).sum().backward()
                    (ty * ty).sum().backward()
                    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)
        return cf.cache_stats()["compiles"]

    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    ns = [(n,) for n in [5, 6, 9, 15, 2, 4, 3]]
    # a Python int stop or start past the end: one entry for all n >= 5 (plus n == 5 first
    # as a constant and one symbolic entry below the size)
    assert run(lambda x, n: x[:, :n] * 2, lambda x, n: x[:, :n] * 2, [a] * len(ns), *ns) == 3
    assert run(lambda x, n: x[:, n:] * 2, lambda x, n: x[:, n:] * 2, [a] * len(ns), *ns) == 3
    # an int bound past a changing dim: the dim stays symbolic on both sides of the bound
    rows = [rng.standard_normal((2, k)).astype(np.float32) for k in range(2, 14)]
    assert run(lambda h: h[:, :8] * 2, lambda h: h[:, :8] * 2, rows) == 3
    # a pad amount computed from a changing dim: its sign is guarded, not its value
    assert run(lambda h: tj.nn.functional.pad(h, (0, 8 - h.shape[1])) * 2,
               lambda h: F.pad(h, (0, 8 - h.shape[1])) * 2, rows) == 4


def test_start_bounds_and_values_of_n_in_arithmetic(compiler):
    x = tj.randn(12, 4)

    def f(x, n):
        return x[n:].sum(0) * n + x[:n].mean(0)

    cf = tj.trace(f, compiler=compiler)
    _sweep(cf, x, [3, 4, 5, 7, 10], lambda a, n: a[n:].sum(0) * n + a[:n].mean(0))
    assert cf.cache_stats()["compiles"] == 2


def test_gradient_through_a_symbolic_slice(compiler):
    w = tj.randn(10, 3, requires_grad=True)
    cf = tj.trace(lambda w, n: (w[:n] ** 2).sum(), compiler=compiler)
    for n in (3, 4, 7):
        w.grad = None
        cf(w, n).backward()
        expect = np.zeros((10, 3), np.float32)
        expect[:n] = 2 * w.detach().numpy()[:n]
        np.testing.assert_allclose(w.grad.numpy(), expect, rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 2


def test_with_a_dynamic_batch_dim_too():
    cf = tj.trace(lambda x, n: x[:n].sum(1), compiler="interpret")
    rng = np.random.default_rng(0)
    for b, n in [(8, 2), (9, 3), (10, 4), (12, 5), (7, 6), (11, 9)]:
        a = rng.standard_normal((b, 3)).astype(np.float32)
        np.testing.assert_allclose(cf(tj.tensor(a), n).numpy(), a[:n].sum(1), rtol=1e-6)
    assert cf.cache_stats()["compiles"] <= 3
    # n past the batch (11 rows, n=12): the guard n <= batch fails, and Python's slice
    # clamps as eagerly
    a = rng.standard_normal((11, 3)).astype(np.float32)
    np.testing.assert_allclose(cf(tj.tensor(a), 12).numpy(), a[:12].sum(1), rtol=1e-6)


def test_code_needing_the_value_keeps_it_specialized():
    def f(x, n):
        y = x[:n]
        return y * 2 if n > 4 else y     # a Python branch on n itself

    cf = tj.trace(f, compiler="interpret")
    x = tj.randn(10)
    _sweep(cf, x, [2, 3, 5, 6], lambda a, n: a[:n] * 2 if n > 4 else a[:n])
    assert cf.cache_stats()["compiles"] <= 4


def test_bounds_computed_from_the_argument(compiler):
    x = tj.randn(30, 2)

    def f(x, n):
        return x[:n + 1].sum(0) - x[2 * n - 1:].sum(0)

    cf = tj.trace(f, compiler=compiler)
    _sweep(cf, x, range(2, 12), lambda a, n: a[:n + 1].sum(0) - a[2 * n - 1:].sum(0))
    assert cf.cache_stats()["compiles"] == 2


def test_a_created_tensor_of_the_argument_size():
    x = tj.randn(5)
    cf = tj.compile(lambda x, n: tj.ones(n, 2) * x.sum())
    _sweep(cf, x, range(1, 9), lambda a, n: np.ones((n, 2), np.float32) * a.sum())
    assert cf.cache_stats()["compiles"] == 2   # n=1, then one symbolic entry for n >= 2


def test_narrow_by_an_int_argument(compiler):
    x = tj.randn(16, 3)
    cf = tj.trace(lambda x, n: x.narrow(0, 1, n).sum(0), compiler=compiler)
    _sweep(cf, x, range(1, 11), lambda a, n: a[1:1 + n].sum(0))
    assert cf.cache_stats()["compiles"] == 2
    with pytest.raises(IndexError, match="exceeds"):   # past the dim: as eagerly
        cf(x, 16)


def test_narrow_by_a_changing_start_and_its_gradient_match_torch(compiler):
    torch = pytest.importorskip("torch")
    x = tj.randn(4, 20, requires_grad=True)
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    cf = tj.trace(lambda x, s: (x.narrow(1, s, 3) * 2).sum(0), compiler=compiler)
    for s in (2, 5, 9, 17, 11, 4):
        got, want = cf(x, s), (tx.narrow(1, s, 3) * 2).sum(0)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        got.sum().backward()
        want.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    assert cf.cache_stats()["compiles"] == 2   # s=2 static, then one entry for every start
    with pytest.raises(IndexError, match="exceeds"):   # past the dim: as eagerly
        cf(x, 18)


def test_select_by_a_changing_index_matches_torch():
    torch = pytest.importorskip("torch")
    x = tj.randn(3, 12)
    cf = tj.compile(lambda x, i: x.select(1, i) * 2)
    for i in (2, 5, 7, -1, 11):
        np.testing.assert_array_equal(cf(x, i).numpy(), (torch.tensor(x.numpy()).select(1, i) * 2).numpy())
    assert cf.cache_stats()["compiles"] == 2
    with pytest.raises(IndexError):
        cf(x, 12)


def test_arange_of_a_changing_int_argument_matches_torch():
    torch = pytest.importorskip("torch")
    x = tj.randn(12)
    cf = tj.compile(lambda x, i: (tj.arange(i) * x[:i]).sum() + tj.arange(1, i + 1).sum())
    tx = torch.tensor(x.numpy())
    for i in (2, 5, 7, 3, 9, 4):
        want = (torch.arange(i) * tx[:i]).sum() + torch.arange(1, i + 1).sum()
        np.testing.assert_allclose(cf(x, i).item(), want.item(), rtol=1e-5)
    assert cf.cache_stats()["compiles"] == 2   # i=2, then one entry for every i >= 2


def test_pad_by_a_changing_int_argument_and_its_gradient_match_torch():
    torch = pytest.importorskip("torch")
    x = tj.randn(3, 12, requires_grad=True)
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    cf = tj.compile(lambda x, i: tj.nn.functional.pad(x, (i, 1)) * tj.arange(13 + i))
    for i in (2, 5, 7, 3, 9):
        got = cf(x, i)
        want = torch.nn.functional.pad(tx, (i, 1)) * torch.arange(13 + i)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy())
        got.sum().backward()
        want.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    assert cf.cache_stats()["compiles"] == 2


def test_a_slice_from_the_end_by_a_changing_int_matches_torch():
    torch = pytest.importorskip("torch")
    x = tj.randn(3, 12, requires_grad=True)
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    cf = tj.compile(lambda x, i: x[:, -i:].sum(1) * x[:, :-i].sum(1))
    for i in (2, 5, 7, 3, 9, 4):
        got, want = cf(x, i), tx[:, -i:].sum(1) * tx[:, :-i].sum(1)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5)
        got.sum().backward()
        want.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    assert cf.cache_stats()["compiles"] == 2
    np.testing.assert_allclose(cf(x, 20).detach().numpy(), (tx[:, -20:].sum(1) * tx[:, :-20].sum(1)).detach().numpy())


def test_script_int_argument_slice_becomes_symbolic_after_it_changes():
    def f(x, n: int):
        return x[:n].sum(0)

    cf = tj.script(f, compiler="interpret")
    x = tj.randn(20, 2)
    _sweep(cf, x, range(1, 11), lambda a, n: a[:n].sum(0))
    st = cf.cache_stats()
    assert st["compiles"] == 2
    (reason,) = st["recompile_reasons"]
    assert reason.startswith("using a number argument as an index, size or range bound at test_size_args.py:")
    assert reason.endswith(" specialized n to 1, now 2")


def test_dynamic_false_keeps_each_value_specialized():
    cf = tj.trace(lambda x, n: x[:n].sum(0), compiler="interpret", dynamic=False)
    x = tj.randn(8, 2)
    _sweep(cf, x, [2, 3, 4], lambda a, n: a[:n].sum(0))
    assert cf.cache_stats()["compiles"] == 3
    assert all("i0" not in str(e.opt_graph) for e in cf.entries)


def test_dynamic_true_makes_an_int_argument_symbolic_from_the_first_call():
    # (torch.compile(dynamic=True)'s SymInt: a count of groups sizing a buffer)
    def segment_sum(x, seg, n):
        return tj.zeros(n, x.shape[1]).index_add(0, seg, x)
    cf = tj.compile(segment_sum, dynamic=True)
    x = tj.randn(6, 2)
    for seg, n in [([0, 0, 1, 2, 3, 3], 4), ([0, 1, 1, 2, 2, 2], 3), ([0, 1, 2, 3, 4, 4], 5)]:
        want = np.zeros((n, 2), np.float32)
        np.add.at(want, np.array(seg), x.numpy())
        np.testing.assert_allclose(cf(x, tj.tensor(seg), n).numpy(), want, rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]
    cf(x, tj.tensor([0] * 6), 1)   # 0 and 1 are specialized, as torch.compile's
    assert cf.cache_stats()["compiles"] == 2


_DIVISORS = [2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 36, 48]


def _compare_with_torch(fn, values, x):
    torch = pytest.importorskip("torch")
    cf = tj.compile(fn)
    xt = torch.from_numpy(x.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # no recompile-limit fallback
        for a in values:
            np.testing.assert_allclose(cf(x, a).numpy(), fn(xt, a).numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"a={a}")
    return cf


def test_view_with_minus_one_by_an_int_argument_captures_twice():
    x = tj.randn(144)
    cf = _compare_with_torch(lambda x, a: x.view(a, -1).sum(1), _DIVISORS, x)
    # torch.compile: 2 (the first value, then one entry for every a)
    assert cf.cache_stats()["compiles"] == 2
    assert "q0" in str(cf.entries[1].opt_graph)


def test_view_by_a_floor_division_of_the_argument_captures_twice():
    x = tj.randn(144)
    cf = _compare_with_torch(lambda x, a: x.view(a, 144 // a).sum(1) * (144 // a), _DIVISORS, x)
    assert cf.cache_stats()["compiles"] == 2


def test_gradient_through_a_view_of_inferred_size(compiler):
    w = tj.randn(72, requires_grad=True)
    cf = tj.trace(lambda w, a: (w.view(a, -1) ** 2).sum(1).max(), compiler=compiler)
    for a in (2, 3, 4, 6):
        w.grad = None
        cf(w, a).backward()
        rows = w.detach().numpy().reshape(a, -1)
        expect = np.zeros_like(rows)
        k = (rows ** 2).sum(1).argmax()
        expect[k] = 2 * rows[k]
        np.testing.assert_allclose(w.grad.numpy(), expect.reshape(-1), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 2


def test_a_size_that_does_not_divide_raises_as_eagerly():
    torch = pytest.importorskip("torch")
    x = tj.randn(144)
    f = lambda x, a: x.view(a, -1).sum(1)   # noqa: E731
    cf = tj.compile(f)
    cf(x, 2), cf(x, 3)   # the second: the symbolic entry, guarded exact
    # a quotient below 2 (a=144: 1 column) misses the symbolic entry and stays right
    np.testing.assert_allclose(cf(x, 144).numpy(), x.numpy().reshape(144, 1).sum(1), rtol=1e-6)
    assert any("144 // (a)) >= 2" in r for r in cf.cache_stats()["recompile_reasons"])
    with pytest.raises(tj.errors.ShapeError) as eager:
        f(x, 5)
    with pytest.raises(tj.errors.ShapeError) as compiled:
        cf(x, 5)
    assert str(compiled.value) == str(eager.value)
    with pytest.raises(RuntimeError, match="invalid for input of size 144"):
        f(torch.zeros(144), 5)


def test_a_reshape_to_int_arguments_that_all_change_captures_twice():
    """``x.reshape(a, b)`` with the length of `x`, `a` and `b` all new on each call: the
    element counts ``i0*i1`` and ``s0`` are guarded equal, not specialized per shape."""
    torch = pytest.importorskip("torch")
    f = lambda x, a, b: (x.reshape(a, b) ** 2).sum(0)   # noqa: E731
    cf = tj.compile(f)
    for a, b in [(2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]:
        v = np.random.default_rng(a).standard_normal(a * b).astype(np.float32)
        x, xt = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = cf(x, a, b), f(xt, a, b)
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
        y.sum().backward(), yt.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
    x = tj.randn(20, requires_grad=True)
    with pytest.raises(tj.errors.ShapeError) as eager:
        f(x, 3, 5)
    with pytest.raises(tj.errors.ShapeError) as compiled:
        cf(x, 3, 5)
    assert str(compiled.value) == str(eager.value)


def test_a_recurrent_layer_over_a_slice_to_an_int_argument_captures_twice():
    """CPC runs its GRU over the frames up to a sampled t: the slice, the layer's reshapes of
    the non-contiguous view and its time loop take the symbolic length."""
    tj.manual_seed(0)
    gru = tj.nn.GRU(4, 3, batch_first=True)

    def f(z, t):
        out, h = gru(z.transpose(1, 2)[:, :t + 1, :])
        return out[:, t, :].sum() + h.pow(2).sum()

    cf = tj.compile(f)
    for t in (1, 5, 2, 3, 8):
        z = tj.randn(3, 4, 10, requires_grad=True)
        got = cf(z, t)
        (g,) = tj.autograd.grad(got, [z])
        want = f(z, t)
        (w,) = tj.autograd.grad(want, [z])
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    assert cf.cache_stats()["compiles"] == 2


def test_is_contiguous_of_a_view_by_an_int_argument_is_eagers():
    """``z[:, :t + 1]`` is strided for every t short of the whole dim: a compiled call
    answers as eager code, however many values of t it has seen."""
    def f(z, t):
        y = z[:, :t + 1]
        return y.is_contiguous(), y.sum()

    cf = tj.compile(f, fullgraph=True)
    z = np.arange(12, dtype=np.float32).reshape(2, 6)
    for t in (1, 2, 3, 5):
        (got, total), (want, wtotal) = cf(tj.tensor(z), t), f(tj.tensor(z), t)
        assert got == want == (t == 5) and total.item() == wtotal.item()


def test_view_merging_dims_of_a_view_by_an_int_argument_raises_as_eager_code():
    """``z[:, :t + 1].view(-1)`` is a view only where t + 1 spans the row (or is 1)."""
    def f(z, t):
        return z[:, :t + 1].view(-1)

    cf = tj.compile(f, dynamic=True)
    z = tj.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    for t in (0, 1, 2, 3, 1):
        if t in (0, 3):
            assert cf(z, t).tolist() == f(z, t).tolist()
            continue
        with pytest.raises(RuntimeError, match="view"):
            f(z, t)
        with pytest.raises(RuntimeError, match="view"):
            cf(z, t)
    assert cf(z[:2], 3).tolist() == list(range(8))   # (a split needs no size: still one capture)


def test_a_view_of_contiguous_merging_dynamic_dims_keeps_them_dynamic():
    """``.contiguous()`` gives row-major memory: viewing it merged needs no size's value."""
    def f(x):
        y = x.permute(0, 2, 1).contiguous()
        return y.view(y.shape[0], -1) * 2.0

    cf = tj.compile(f, dynamic=True)
    for n in (3, 4, 5):
        x = tj.tensor(np.arange(2 * n * 6, dtype=np.float32).reshape(2, n, 6))
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    assert cf.cache_stats()["compiles"] == 1


def test_contiguous_of_a_permuted_dynamic_tensor_is_a_copy():
    """Writes into ``.contiguous()`` of a transposed tensor stay in the copy, as eagerly."""
    def f(x):
        y = x * 1.0
        z = y.permute(1, 0).contiguous()
        z[0] = 5.0
        return y, z, y.t().is_contiguous(), y.unsqueeze(0).permute(1, 0, 2).is_contiguous()

    cf = tj.compile(f, dynamic=True)
    for n in (3, 4, 5):
        x = tj.tensor(np.arange(2 * n, dtype=np.float32).reshape(2, n))
        got, want = cf(x), f(x)
        for g, w in zip(got[:2], want[:2]):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        assert got[2:] == want[2:] == (False, True)
    assert cf.cache_stats()["compiles"] == 1


def test_channels_last_contiguity_of_a_dynamic_tensor_follows_its_permutes():
    """``is_contiguous(memory_format=channels_last)`` of dynamic-size tensors: a row-major
    image is not, an NHWC tensor permuted to NCHW is, as eagerly."""
    def f(x):
        y = x * 1.0
        nchw = y.permute(0, 3, 1, 2)
        return (y.is_contiguous(memory_format=tj.channels_last), nchw.is_contiguous(memory_format=tj.channels_last),
                nchw.is_contiguous(), nchw.transpose(2, 3).is_contiguous(memory_format=tj.channels_last))

    cf = tj.compile(f, dynamic=True)
    for h in (4, 5, 7):
        x = tj.tensor(np.zeros((2, h, h + 1, 3), np.float32))
        assert cf(x) == f(x) == (False, True, False, False)
    assert cf.cache_stats()["compiles"] == 1


def test_a_size_made_of_an_int_argument_and_a_shape_stays_symbolic():
    # (n,) + x.shape[1:] is a Size (its __radd__): n must not be read as a value there
    x = tj.randn(7, 3)
    f = tj.compile(lambda x, n: x.new_zeros((n,) + x.shape[1:]) + x.sum(0), dynamic=True)
    _sweep(f, x, (4, 3, 5, 6), lambda a, n: np.zeros((n, 3), np.float32) + a.sum(0))
    assert f.cache_stats()["compiles"] == 1, f.cache_stats()["recompile_reasons"]


def _sweep_torch(fn, sizes, rows=24, dynamic=True):
    """`fn(x, n)` compiled over `sizes`, each result compared with torch's eager one."""
    torch = pytest.importorskip("torch")
    cf = tj.compile(fn, dynamic=dynamic)
    a = np.random.default_rng(0).standard_normal((rows, 3)).astype(np.float32)
    for n in sizes:
        np.testing.assert_allclose(cf(tj.tensor(a), n).numpy(), fn(torch.tensor(a), n).numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=f"n={n}")
    return cf


def test_a_remainder_of_an_int_argument_stays_symbolic():
    # (a quotient of 0 or 1 too: n % 4 is a symbol of its own there)
    cf = _sweep_torch(lambda x, n: x[n % 3:].sum(0) + x[:n % 4 + 1].sum(0), [6, 9, 3, 10, 13, 5, 15, 22])
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]
    cf(tj.randn(24, 3), 1)   # 0 and 1 are specialized, as torch.compile's
    assert cf.cache_stats()["compiles"] == 2


def test_padding_to_a_multiple_is_one_capture():
    # (a window attention's padding: (w - h % w) % w, then a view by windows)
    F = tj.nn.functional

    def f(x, n):
        y = F.pad(x, (0, 0, 0, (8 - x.shape[0] % 8) % 8)) if n else x
        return y.view(-1, 8, x.shape[1]).sum(1)
    cf = tj.compile(f, dynamic=True)
    for rows in (17, 24, 21, 32, 5, 8, 3, 13):
        a = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        want = np.concatenate([a, np.zeros((-rows % 8, 3), np.float32)]).reshape(-1, 8, 3).sum(1)
        np.testing.assert_allclose(cf(tj.tensor(a), 1).numpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"{rows}")
    # sizes from 16 share one entry; below, (h + pad) // 8 is 1: a constant of its own
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]


def test_floor_and_ceil_of_a_fraction_of_sizes_stay_symbolic():
    # (a mixture of experts' capacity, from the tokens' count or an int argument)
    def f(x, n):
        return x[:math.ceil(n * 1.25 / 4)].sum(0) * math.floor(x.shape[0] * 2 / 3)
    cf = _sweep_torch(f, [7, 9, 13, 20], rows=24)
    for rows in (10, 17):
        _check = cf(tj.ones(rows, 3), 11).numpy()
        np.testing.assert_allclose(_check, np.full(3, 4.0 * math.floor(rows * 2 / 3)))
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]
    # the float's floor is the floor division's while the numerator stays below 2^53
    np.testing.assert_allclose(cf(tj.ones(10, 3), 2 ** 60).numpy(), np.full(3, 60.0))
    assert cf.cache_stats()["compiles"] == 2


def test_int_of_a_fraction_of_sizes_is_guarded_by_its_value():
    cf = _sweep_torch(lambda x, n: x[:int(n * 1.25 / 4)].sum(0), [7, 8, 9], dynamic=True)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]   # capacity 2
    cf(tj.randn(24, 3), 13)
    assert cf.cache_stats()["compiles"] == 2
    reason = cf.cache_stats()["recompile_reasons"][-1]
    assert "math.floor" in reason and "5*n <= 47" in reason, reason


def test_a_remainder_of_one_broadcasts():
    # (a dim of 1 broadcasts where a symbol's would not: that size is made static)
    def f(x, y, n):
        return (x[:n % 4] * y).sum(0)
    cf = tj.compile(f, dynamic=True)
    for n, rows in ((5, 6), (9, 7), (6, 2), (13, 4)):   # n % 4 == 1 broadcasts, 2 matches rows
        x, y = tj.randn(8, 3), tj.randn(rows, 3)
        np.testing.assert_allclose(cf(x, y, n).numpy(), f(x, y, n).numpy(), rtol=1e-5, atol=1e-6)


def test_int_and_floor_of_a_fraction_that_turns_negative_match_eager():
    def f(x, n):   # (int() truncates: -2.5 gives -2, floor -3)
        return x[:int((n - 8) * 0.5) + 4].sum(0) + x[:math.floor((n - 8) * 0.5) + 4].sum(0)
    cf = tj.compile(f, dynamic=True)
    for n in (3, 12, 14, 9, 2, 20):   # (n - 8) / 2 below 0 from n = 7: its own entries
        x = tj.randn(24, 3)
        np.testing.assert_allclose(cf(x, n).numpy(), f(x, n).numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{n}")


def test_a_view_over_a_padded_length_serves_one_block_and_more(monkeypatch):
    # (its -1 is 1 at the first size: a size from 0 up, not a constant of the entry)
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    F = tj.nn.functional

    def f(x):
        return F.pad(x, (0, (8 - x.shape[1] % 8) % 8)).reshape(2, -1, 8).sum(-1)
    cf = tj.compile(f, dynamic=True)
    for n in (5, 8, 9, 13, 20):
        a = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
        want = np.concatenate([a, np.zeros((2, -n % 8), np.float32)], 1).reshape(2, -1, 8).sum(-1)
        np.testing.assert_allclose(cf(tj.tensor(a)).numpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"{n}")
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


@pytest.mark.parametrize("grad", [False, True])
def test_split_by_an_int_argument_and_the_rest_of_a_changing_dim_captures_twice(grad):
    """``x.split([n, x.shape[0] - n])``, n an int argument and x's dim both changing: the
    second section is a size computed from both, not a value captured once per size."""
    torch = pytest.importorskip("torch")

    def f(x, n):
        a, b = x.split([n, x.shape[0] - n])
        return a.sum(0) * 2 + b.sum(0), b * 3

    cf = tj.compile(f)
    rng = np.random.default_rng(0)
    for n in range(2, 10):
        v = rng.standard_normal((n + 3 + n % 3, 4)).astype(np.float32)
        x, t = tj.tensor(v, requires_grad=grad), torch.tensor(v, requires_grad=grad)
        got, want = cf(x, n), f(t, n)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-6)
        if grad:
            (got[0].sum() + (got[1] * got[1]).sum()).backward()
            (want[0].sum() + (want[1] * want[1]).sum()).backward()
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 2, st["recompile_reasons"]
