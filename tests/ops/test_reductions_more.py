"""searchsorted and bucketize against PyTorch: sides, sorter, batched sequences, int32
results, and the errors for contradicting or misshaped arguments; torch.gradient's
spacings, dims and edge orders; unique with and without its inverse."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError

torch = pytest.importorskip("torch", reason="compares with PyTorch")

SEQ = [1.0, 3.0, 3.0, 5.0, 7.0]
VALS = [[0.0, 3.0, 6.0], [7.0, 8.0, 3.0]]
CASES = {
    "left": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(VALS)),
    "right": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(VALS), right=True),
    "side": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(VALS), side="right", out_int32=True),
    "sorter": lambda m: m.searchsorted(m.tensor([5.0, 1.0, 7.0, 3.0]), m.tensor([2.0, 6.0]),
                                       sorter=m.tensor([1, 3, 0, 2])),
    "batched": lambda m: m.searchsorted(m.tensor([[1.0, 2.0, 4.0], [0.0, 5.0, 9.0]]), m.tensor([[3.0], [6.0]])),
    "scalar": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(4.0)),
    "bucketize": lambda m: m.bucketize(m.tensor(VALS), m.tensor(SEQ)),
    "bucketize right": lambda m: m.bucketize(m.tensor(VALS), m.tensor(SEQ), right=True, out_int32=True),
    # an unsorted (or nan-holding) sequence: PyTorch's bisection decides, not numpy's search
    "unsorted": lambda m: m.bucketize(m.tensor([0.56, 0.36, 0.58, 0.37, 0.41]),
                                      m.tensor([0.56, 0.36, 0.58, 0.37, 0.41])),
    "unsorted right": lambda m: m.searchsorted(m.tensor([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]),
                                               m.tensor([0.0, 1.0, 2.0, 6.0, 10.0]), right=True),
    "unsorted batched": lambda m: m.searchsorted(m.tensor([[2.0, float("nan"), 1.0], [5.0, 0.0, 9.0]]),
                                                 m.tensor([[0.5, 1.5], [4.0, 6.0]])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_indices_as_pytorch(case):
    got, ref = CASES[case](tj), CASES[case](torch)
    assert str(got.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1]
    assert got.tolist() == ref.tolist()


def test_bad_arguments_name_the_culprit():
    with pytest.raises(ShapeError, match="boundaries must be 1-D"):
        tj.bucketize(tj.ones(2), tj.ones(2, 2))
    with pytest.raises(ValueError, match="contradict"):
        tj.searchsorted(tj.tensor(SEQ), tj.tensor(2.0), right=True, side="left")
    with pytest.raises(ShapeError, match="sorter"):
        tj.searchsorted(tj.tensor(SEQ), tj.tensor(2.0), sorter=tj.tensor([0, 1]))
    with pytest.raises(ShapeError, match="leading dims"):
        tj.searchsorted(tj.ones(2, 3), tj.ones(3, 1))


def test_cummax_and_cummin_of_a_0d_tensor_give_it_at_index_0():
    for fn in (tj.cummax, tj.cummin):
        for dim in (0, -1):
            values, indices = fn(tj.tensor(3.5), dim)
            assert values.shape == () and values.item() == 3.5 and indices.item() == 0
    with pytest.raises(IndexError, match="dim 1"):
        tj.cummax(tj.tensor(3.0), 1)


def test_any_and_all_of_uint8_give_uint8_as_pytorch():
    torch = pytest.importorskip("torch")
    for m in (tj, torch):
        a = m.tensor([[0, 3], [1, 2]], dtype=m.uint8)
        outs = [a.any(), a.all(), m.any(a, 1), m.all(a, dim=0, keepdim=True), m.tensor([], dtype=m.uint8).all()]
        assert [o.dtype for o in outs] == [m.uint8] * 5
        assert [o.tolist() for o in outs] == [1, 0, [1, 1], [[0, 1]], 1]
    assert tj.tensor([0, 2]).any().dtype == tj.bool


@pytest.mark.parametrize("op", ["cummax", "cummin", "mode"])
def test_value_index_scans_take_inputs_that_require_grad(op):
    a = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 1.0]])
    x, xt = tj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    got, ref = getattr(tj, op)(x, 1), getattr(torch, op)(xt, 1)
    np.testing.assert_array_equal(got.values.detach().numpy(), ref.values.detach().numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    w = np.arange(got.values.numel(), dtype=np.float64).reshape(tuple(got.values.shape))
    (got.values * tj.tensor(w)).sum().backward()
    (ref.values * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("call", [
    lambda m, x: m.kthvalue(x, 1, -1), lambda m, x: m.nanmedian(x, -1, keepdim=True),
    lambda m, x: m.median(x, 0), lambda m, x: m.cummax(x, 0), lambda m, x: m.cummin(x, -1),
    lambda m, x: m.mode(x, 0)])
def test_value_index_ops_on_a_0d_tensor(call):
    got, ref = call(tj, tj.tensor(2.5)), call(torch, torch.tensor(2.5))
    assert tuple(got.values.shape) == tuple(ref.values.shape) == ()
    assert got.values.item() == ref.values.item() and got.indices.item() == ref.indices.item()


@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
def test_moments_keep_all_dims_for_dim_none(op):
    a = np.arange(6.0).reshape(2, 3)
    got = getattr(tj, op)(tj.tensor(a), keepdim=True)
    ref = getattr(torch, op)(torch.tensor(a), keepdim=True)
    for g, r in zip(got, ref):
        assert tuple(g.shape) == tuple(r.shape) == (1, 1)
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-12)


@pytest.mark.parametrize("op", ["nansum", "nanmean"])
def test_nan_reductions_keep_all_dims_for_dim_none(op):
    a = np.array([[1.0, np.nan, 3.0], [np.nan, 5.0, 6.0]])
    got = getattr(tj, op)(tj.tensor(a), keepdim=True)
    ref = getattr(torch, op)(torch.tensor(a), keepdim=True)
    assert tuple(got.shape) == tuple(ref.shape) == (1, 1)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12)


def test_value_ops_take_tensors_that_require_grad():
    # (PyTorch documents these as index/count results: no gradient, any input accepted)
    cdf = [[0.0, 0.3, 1.0], [0.0, 0.6, 1.0]]
    for m in (tj, torch):
        seq = m.tensor(cdf, requires_grad=True) * 1.0
        u = m.tensor([[0.5, 0.2], [0.7, 0.6]], requires_grad=True)
        x = m.tensor([3.0, 1.0, 2.0, 1.0], requires_grad=True)
        got = [m.searchsorted(seq, u, right=True).tolist(), m.bucketize(x, m.tensor([1.5, 2.5])).tolist(),
               m.unique(x).tolist(), m.isin(x, m.tensor([1.0])).tolist(), m.histc(x, bins=3).tolist(),
               m.bincount(m.tensor([0, 1, 1]), weights=x[:3]).tolist()]
        if m is tj:
            mine = got
    assert mine == got == [[[2, 1], [2, 2]], [2, 0, 1, 0], [1.0, 2.0, 3.0], [False, True, False, True],
                           [2.0, 1.0, 1.0], [3.0, 3.0]]


def test_histc_is_captured_with_its_fixed_number_of_bins():
    # the data's own range (a new range each call) and a given one with values outside it
    def f(m, x):
        return m.histc(x * 2, bins=4) + m.histc(x, bins=4, min=-1, max=1) * 10
    g = tj.compile(f, fullgraph=True)
    for a in (np.array([0.5, -2.0, 0.25, 3.0, 0.9, -0.7], np.float32), np.array([1.0, 1.0, 1.0], np.float32)):
        want = f(torch, torch.from_numpy(a))
        got = g(tj, tj.from_numpy(a))
        assert got.dtype is tj.float32 and got.tolist() == want.tolist()


def test_dist_promotes_one_integer_operand_and_refuses_two_as_pytorch():
    a, b = [1, 2, 4], [1.5, 2.0, 1.0]
    for p in (0, 1, 2, float("inf")):
        want = torch.dist(torch.tensor(a), torch.tensor(b), p=p)
        got = tj.dist(tj.tensor(a), tj.tensor(b), p=p)
        assert got.dtype is tj.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="dist"):
        tj.dist(tj.tensor(a), tj.tensor(a))


@pytest.mark.parametrize("p", [2, 3, 0.5, 1, float("inf")])
def test_dist_of_equal_operands_has_a_zero_gradient(p):
    # (as PyTorch's; the composite's root gave 0 * inf = nan)
    a = np.array([[1.0, 2.0], [0.0, 3.0]])
    res = []
    for m in (torch, tj):
        x, y = m.tensor(a, requires_grad=True), m.tensor(a, requires_grad=True)
        m.dist(x * 1.0, y * 1.0, p).backward()
        res.append((x.grad.numpy(), y.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape, dim", [((0,), 0), ((2, 0), 1), ((0, 3), 0)])
def test_logcumsumexp_over_an_empty_dim_is_empty(shape, dim):
    got = tj.logcumsumexp(tj.zeros(shape), dim)
    want = torch.logcumsumexp(torch.zeros(shape), dim)
    assert tuple(got.shape) == tuple(want.shape) and got.dtype is tj.float32


def test_median_propagates_nan_with_its_index_and_nanmedian_skips_it():
    nan = float("nan")
    a = np.array([[3.0, nan, 0.0, nan, 1.0], [nan] * 5, [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 2.0, 1.0, 2.0]])
    for name in ("median", "nanmedian"):
        want, got = getattr(torch.tensor(a), name)(1), getattr(tj.tensor(a), name)(1)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy()[:1], want.indices.numpy()[:1])
        np.testing.assert_array_equal(getattr(tj.tensor(a), name)().numpy(), getattr(torch.tensor(a), name)().numpy())
    assert np.isnan(tj.zeros(0).median().item()) and np.isnan(tj.zeros(0, 3).nanmedian().item())
    with pytest.raises(IndexError, match="non-zero size"):   # (PyTorch: IndexError)
        tj.zeros(0, 3).median(0)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_median_of_an_integer_tensor_matches_pytorch(dtype):
    a = np.array([[7, 1, 5, 3], [2, 9, 4, 0], [6, 6, 1, 6]], dtype=dtype)
    for name in ("median", "nanmedian"):
        for dim, keepdim in ((1, False), (0, True)):
            want, got = getattr(torch.tensor(a), name)(dim, keepdim), getattr(tj.tensor(a), name)(dim, keepdim)
            assert got.values.dtype == getattr(tj, dtype) and tuple(got.values.shape) == tuple(want.values.shape)
            np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
            np.testing.assert_array_equal(got.indices.numpy()[:2], want.indices.numpy()[:2])   # (row 2: ties)
        assert getattr(tj.tensor(a), name)().item() == getattr(torch.tensor(a), name)().item() == 4


@pytest.mark.parametrize("shape, n, dim", [((0, 4), 1, 0), ((2, 4), 3, 0), ((3, 0), 2, 1)])
def test_diff_over_an_empty_or_exhausted_dim_is_empty(shape, n, dim):
    for dtype in (torch.float32, torch.bool, torch.int8):
        want = torch.diff(torch.zeros(shape, dtype=dtype), n=n, dim=dim)
        got = tj.diff(tj.zeros(shape, dtype=getattr(tj, str(dtype).split(".")[-1])), n=n, dim=dim)
        assert tuple(got.shape) == tuple(want.shape) and str(got.dtype)[9:] == str(want.dtype)[6:]


@pytest.mark.parametrize("vals", [[float("nan")], [1.0, float("nan"), float("nan")], [float("nan"), float("nan"), 1.0, 1.0],
                                  [2.0, float("nan"), 1.0]])
def test_unique_counts_each_nan_apart_and_mode_takes_a_nan_row(vals):
    want = torch.unique(torch.tensor(vals), return_inverse=True, return_counts=True)
    got = tj.unique(tj.tensor(vals), return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    wm, gm = torch.tensor(vals).mode(), tj.tensor(vals).mode()
    np.testing.assert_array_equal(gm.values.numpy(), wm.values.numpy())
    assert gm.indices.item() == wm.indices.item()


@pytest.mark.parametrize("kw", [{}, {"spacing": 0.5, "dim": 1}, {"spacing": [2.0, 0.5]},
                                {"dim": -1, "edge_order": 2}, {"coords": True, "dim": 1},
                                {"coords": True, "dim": 1, "edge_order": 2}])
def test_gradient_matches_pytorch(kw):
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    c = np.cumsum(np.random.default_rng(1).random(6) + 0.2).astype(np.float32)
    kw = dict(kw)
    coords = kw.pop("coords", False)
    want = torch.gradient(torch.tensor(x), **kw, **({"spacing": (torch.tensor(c),)} if coords else {}))
    xt = tj.tensor(x, requires_grad=True)
    got = tj.gradient(xt, **kw, **({"spacing": (tj.tensor(c),)} if coords else {}))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    sum(g.sum() for g in got).backward()   # a composite: differentiable
    assert xt.grad.shape == (5, 6)


def test_gradient_refuses_a_dim_too_short_for_its_edge_order():
    with pytest.raises(ShapeError, match="at least edge_order \\+ 1, got size 2 at dim 0"):
        tj.gradient(tj.ones(2, 4), edge_order=2)


def test_a_batch_of_sorted_rows_is_one_bisection_with_pytorchs_answers(monkeypatch):
    """A spline's bins: one sorted row per value (ties, ends, values outside, an empty
    batch); searched all at once, not by a numpy search per row."""
    r = np.random.default_rng(0)
    seq = np.sort(r.integers(0, 6, (300, 9)).astype(np.float32), -1)
    vals = np.concatenate([r.uniform(-1, 7, (300, 2)), seq[:, [0, 4]]], 1).astype(np.float32)
    calls = []
    search = np.searchsorted
    monkeypatch.setattr(np, "searchsorted", lambda *a, **k: calls.append(1) or search(*a, **k))
    for right in (False, True):
        got = tj.searchsorted(tj.tensor(seq), tj.tensor(vals), right=right)
        want = torch.searchsorted(torch.tensor(seq), torch.tensor(vals), right=right)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    empty = tj.searchsorted(tj.zeros(0, 9), tj.zeros(0, 1))
    assert tuple(empty.shape) == (0, 1) and empty.dtype == tj.int64
    assert len(calls) <= 2


@pytest.mark.parametrize("shape,dim", [((0, 3), 1), ((3, 0), 0), ((0, 0), 0), ((2, 0, 3), 2)])
@pytest.mark.parametrize("name", ["unique", "unique_consecutive"])
def test_unique_along_a_dim_refuses_other_zero_sized_dims(name, shape, dim):
    """PyTorch refuses a zero-sized dim that is not the one selected (no slice to return);
    the selected one being the only empty dim gives empty results."""
    with pytest.raises(RuntimeError, match="unique cannot be applied"):
        getattr(torch, name)(torch.zeros(shape), dim=dim)
    with pytest.raises(RuntimeError, match="unique cannot be applied"):
        getattr(tj, name)(tj.zeros(shape), dim=dim)
    got = getattr(tj, name)(tj.zeros(3, 0), dim=1, return_inverse=True, return_counts=True)
    assert [tuple(t.shape) for t in got] == [(3, 0), (0,), (0,)]


@pytest.mark.parametrize("op", [lambda m, x: m.mode(x, 0), lambda m, x: m.cummax(x, 0),
                                lambda m, x: m.cummin(x, 0)])
def test_order_statistics_refuse_complex_tensors_as_pytorch(op):
    c = np.array([1 + 2j, 3 - 1j, 0.5 + 0.5j], np.complex64)
    with pytest.raises((RuntimeError, NotImplementedError)):
        op(torch, torch.tensor(c))
    with pytest.raises(TypeError, match="complex"):
        op(tj, tj.tensor(c))


def test_diff_of_order_zero_ignores_prepend_and_append_as_pytorch():
    x = np.array([[1.0, 2.0, 4.0], [0.0, 3.0, 9.0]])
    def f(x, prepend, append):
        return tj.diff(x, 0, prepend=prepend, append=append)
    for run in (f, tj.compile(f)):
        got = run(tj.tensor(x), prepend=tj.zeros(2, 1, dtype=tj.float64), append=tj.ones(2, 2, dtype=tj.float64))
        np.testing.assert_array_equal(got.numpy(), x)
    with pytest.raises(ValueError, match="non-negative"):
        tj.diff(tj.tensor(x), -1)


@pytest.mark.parametrize("data", [[3, 1, 2, 3, 1, 7, 0], [2.5, float("nan"), -1.0, 2.5, float("nan"), 0.0],
                                  [[4, 4], [1, 9]], []])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
def test_unique_with_and_without_its_inverse_matches_pytorch(data, inverse, counts):
    """Without the inverse the values are sorted in place (no argsort): the values and
    counts PyTorch gives either way, the inverse where asked."""
    torch = pytest.importorskip("torch")
    t = torch.tensor(data) if data else torch.tensor([], dtype=torch.int64)
    want = torch.unique(t, return_inverse=inverse, return_counts=counts)
    got = tj.unique(tj.tensor(t.numpy()), return_inverse=inverse, return_counts=counts)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype.name == str(w.dtype).replace("torch.", "") and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, dim, keepdim", [((9, 31), 1, False), ((6, 5, 4), 0, True),
                                                 ((3, 8, 7), -2, False)])
def test_median_over_a_dim_values_indices_and_gradient_match_pytorch(dtype, shape, dim, keepdim):
    # (the sort only picks the index; the gradient reaches the input through that one gather)
    rng = np.random.default_rng(sum(shape))
    a = rng.permutation(np.prod(shape)).reshape(shape).astype(dtype) * 0.25 - 3   # (no ties)
    out_shape = torch.median(torch.tensor(a), dim, keepdim).values.shape
    g = rng.standard_normal(tuple(out_shape)).astype(dtype)
    got = []
    for lib in (tj, torch):
        x = lib.tensor(a, requires_grad=True)
        v, i = lib.median(x, dim, keepdim)
        (v * lib.tensor(g)).sum().backward()
        got.append([v.detach().numpy(), i.numpy(), x.grad.numpy()])
    for x, y in zip(*got):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
