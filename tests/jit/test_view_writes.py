"""The eager layout of a view inside a compiled function (jit/view_writes.py
`eager_layout`): `view`, `stride()` and `is_contiguous()` answer as they do eagerly and in
PyTorch, so a compiled `view` of a transposed tensor raises instead of returning a result."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

CHAINS = {
    "t_view_flat": lambda a: a.t().view(6),
    "t_view_same": lambda a: a.t().view(3, 2),
    "t_unsqueeze_view": lambda a: a.t().unsqueeze(0).view(1, 3, 2),
    "t_contiguous_view": lambda a: a.t().contiguous().view(6),
    "slice_view": lambda a: a[:, 1:].view(4),
    "slice_rows_view": lambda a: a[1:].view(3),
    "expand_view": lambda a: a[:1].expand(4, 3).view(12),
    "permute_view_merge": lambda a: a.reshape(2, 3, 1).permute(2, 0, 1).view(6),
    "narrow_view": lambda a: a.narrow(1, 0, 2).view(2, 2),
    "select_view": lambda a: a.select(1, 1).view(2, 1),
    "diagonal_view": lambda a: a.diagonal().view(2),
    "unfold_view": lambda a: a.reshape(6).unfold(0, 2, 2).view(6),
    "strides": lambda a: (a.t().stride(), a[:, 1:].stride(), a.t().is_contiguous(), a.is_contiguous()),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_compiled_view_and_strides_match_eager_and_pytorch(name):
    fn = CHAINS[name]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    results = []
    for call in (lambda: fn(torch.tensor(x)), lambda: fn(tj.tensor(x)), lambda: tj.compile(fn)(tj.tensor(x))):
        try:
            out = call()
            results.append(("ok", out if isinstance(out, tuple) else out.numpy().tolist()))
        except RuntimeError as e:
            results.append(("raises", "view" if "view" in str(e) else str(e)))
    assert results[1] == results[0], results
    assert results[2] == results[0], results


def test_stride_of_a_captured_non_contiguous_tensor():
    w = tj.ones(3, 4).t()   # a closure whose own memory is transposed
    out = tj.compile(lambda a: (a + w[0:2].view(-1)[:1], w.stride()))
    with pytest.raises(RuntimeError, match="view"):
        out(tj.ones(1))
    assert tj.compile(lambda a: (a * 1, w.stride(), w.is_contiguous()))(tj.ones(1))[1:] == ((1, 4), False)


def test_view_of_a_non_contiguous_argument_raises_and_the_layout_is_guarded():
    """An argument's layout is its own: a transposed one cannot be viewed flat (as eagerly
    and in PyTorch), and a call with the other layout captures again rather than reuse."""
    def f(a):
        return a.view(6) * 2, a.is_contiguous(), a.stride()

    fn = tj.compile(f)
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    for _ in range(2):
        for make in (lambda m: m.tensor(a).t(), lambda m: m.tensor(a.T.copy())):
            want_err = got_err = None
            try:
                want = f(make(torch))
            except RuntimeError as e:
                want_err = e
            try:
                got = fn(make(tj))
            except RuntimeError as e:
                got_err = e
            assert (want_err is None) == (got_err is None)
            if want_err is None:
                np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
                assert got[1:] == (want[1], tuple(want[2]))
            else:
                assert "view" in str(got_err)


def test_layout_of_an_argument_with_dynamic_sizes_is_guarded():
    """Once its dims are symbolic an argument's layout is still its own: a transposed one
    cannot be viewed flat, whatever the sizes, and row-major ones keep one capture."""
    def f(a):
        return a.view(-1) * 2

    fn = tj.compile(f, backend="interpret")
    for rows in (3, 4, 5, 6):   # dims become dynamic at the second call
        for transposed in (False, True, False):
            a = np.arange(rows * 7, dtype=np.float32).reshape(rows, 7)
            src = a.T.copy() if transposed else a
            ours, theirs = tj.tensor(src), torch.tensor(src)
            if transposed:
                ours, theirs = ours.t(), theirs.t()
            try:
                want = f(theirs)
            except RuntimeError:
                with pytest.raises(RuntimeError, match="view"):
                    fn(ours)
                continue
            np.testing.assert_array_equal(fn(ours).numpy(), want.numpy())
    assert fn.cache_stats()["dynamic_dims"] == [("a", 0)]


def _detached_writes(m):
    def sqrt_detached(x):
        x.detach().sqrt_()
        return x * 2

    def through_a_view(x):
        x.view(-1).detach().mul_(3.0)
        return x + 1

    def part_and_data(x):
        d = x.detach()
        d[0].add_(10.0)
        d.data.add_(1.0)
        return x.sum()

    def data_then_column(x):
        x.data.mul_(2.0)
        x.detach()[:, 0].zero_()
        return x * 1
    return [sqrt_detached, through_a_view, part_and_data, data_then_column]


@pytest.mark.parametrize("k", range(4))
def test_writes_through_detach_reach_the_tensor_without_a_gradient(k):
    # as eagerly: x takes the new values, its gradient is the one it had (the identity)
    a = np.random.default_rng(k).uniform(1, 2, (3, 4)).astype(np.float32)
    res = []
    for m, compiled in ((torch, False), (tj, True)):
        x = m.tensor(a, requires_grad=True)
        h = x * 1.0
        f = _detached_writes(m)[k]
        y = (tj.compile(f) if compiled else f)(h)
        (y * y).sum().backward()
        res.append((y.detach().numpy(), h.detach().numpy(), x.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    x = tj.tensor(a)   # an argument of the compiled function is written too
    tj.compile(_detached_writes(tj)[k])(x)
    t = torch.tensor(a)
    _detached_writes(torch)[k](t)
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6)


def test_a_compiled_write_through_detach_reaches_a_leaf_that_requires_grad():
    # (in-place ops on such a leaf are refused; through detach() or .data they are data writes)
    a = np.random.default_rng(5).uniform(1, 2, (2, 3)).astype(np.float32)

    def f(x):
        x.detach().sqrt_()
        x.data.mul_(2.0)
        return x * 3.0
    res = []
    for m, fn in ((torch, f), (tj, tj.compile(f))):
        x = m.tensor(a, requires_grad=True)
        y = fn(x)
        y.sum().backward()
        res.append((y.detach().numpy(), x.detach().numpy(), x.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("form", ["y[1:].add_(y[:-1])", "y[1:].copy_(y[:-1])", "y[1:].clamp_(min=y[:-1])",
                                  "y.index_add_(0, i, y[:2])", "y[:2].add_(y[2:4])", "y.add_(y)"])
def test_an_in_place_write_partly_overlapping_its_input_raises_as_eager_code(form):
    def f(x):
        y = x.clone()
        eval(form, {"y": y, "i": tj.tensor([0, 1])})
        return y
    x = tj.arange(8.0)
    try:
        want = f(x).tolist()
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="single memory location"):
            tj.compile(f)(x)
        assert "single memory location" in str(e)
        return
    assert tj.compile(f)(x).tolist() == want


@pytest.mark.parametrize("form", ["y[1:] = y[:-1]", "y[:2] = y[2:4]", "y[0] = y[1]", "y[i] = y[2:4]",
                                  "z = y[1:]; z[:2] = y[:2]", "y[1:].add_(y[:-1])"])
def test_an_assignment_overlapping_its_value_raises_as_eager_code_for_any_sizes(form):
    def f(x):
        y = x.clone()
        exec(form, {"y": y, "i": tj.tensor([0, 1])})
        return y
    for dynamic in (False, True):
        c = tj.compile(f, dynamic=dynamic)
        for n in (6, 7):
            x = tj.arange(float(n))
            try:
                want = f(x).tolist()
            except RuntimeError:
                with pytest.raises(RuntimeError, match="single memory location"):
                    c(x)
                continue
            assert c(x).tolist() == want


@pytest.mark.parametrize("key", [np.s_[:, 1:], np.s_[:, :2], np.s_[..., ::2], np.s_[1:, 1:]])
def test_is_contiguous_of_a_slice_of_a_dynamic_argument_is_eagers(key):
    """``x[key].is_contiguous()`` with x's sizes symbolic: PyTorch's answer (a column slice
    of a row-major x is not contiguous), so ``contiguous()`` copies as eagerly (a write into
    the copy leaves x alone) and a diagonal of the slice is a view of x."""
    def f(L, x):
        v = x[key]
        c = v.contiguous()
        c.mul_(0)
        return v.is_contiguous(), c, v.diagonal()

    cf = tj.compile(lambda x: f(tj, x), dynamic=True)
    for shape in ((3, 4), (4, 6), (5, 7)):
        a = np.arange(float(np.prod(shape)), dtype=np.float32).reshape(shape)
        x, t = tj.tensor(a), torch.tensor(a)
        (flag, c, d), (tflag, tc, td) = cf(x), f(torch, t)
        assert flag == tflag, shape
        np.testing.assert_array_equal(c.numpy(), tc.numpy())
        np.testing.assert_array_equal(x.numpy(), t.numpy())   # (the copy's write stayed there)
        assert d._base is x
        d.add_(100)
        td.add_(100)
        np.testing.assert_array_equal(x.numpy(), t.numpy())   # (the diagonal's reached x)


@pytest.mark.parametrize("view", ["step", "t_rows", "chunk", "diag"])
def test_in_place_write_through_a_view_matches_pytorch(view):
    """`_positions` finds the base elements a view covers; an in-place relu through the
    view changes exactly those, as eagerly and in PyTorch."""
    take = {"step": lambda b: b[:, ::2], "t_rows": lambda b: b.t()[1:],
            "chunk": lambda b: b.chunk(2, dim=1)[1], "diag": lambda b: b[:4, :4].diagonal()}[view]

    def f(lib, x):
        b = x * 1
        take(b).relu_()
        return b * 2

    x = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    want = f(torch, torch.tensor(x)).numpy()
    got = tj.compile(lambda a: f(tj, a))(tj.tensor(x)).numpy()
    np.testing.assert_array_equal(got, want)


def test_in_place_write_through_a_view_that_repeats_an_element_raises():
    """A view covering one element twice (an expand) cannot be written in
    place: PyTorch raises, and so does the compiled function, with the base unchanged."""
    def f(lib, x):
        b = x * 1
        b.expand(2, 3).add_(1)
        return b

    x = np.ones((1, 3), dtype=np.float32)
    with pytest.raises(RuntimeError):
        f(torch, torch.tensor(x))
    with pytest.raises(Exception, match="expanded view"):
        tj.compile(lambda a: f(tj, a), fullgraph=True)(tj.tensor(x))
