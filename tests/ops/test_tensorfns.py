"""multinomial (random, so not in the op database), and the tensor functions of
tracejit/ops/tensorfns.py and einsum.py under tracing; values are covered by
tests/opdb_tensorfns.py."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import tensorfns


def test_multinomial_with_replacement_frequencies():
    tj.manual_seed(0)
    p = tj.tensor([[0.1, 0.2, 0.7], [5.0, 0.0, 5.0]])  # rows need not be normalised
    s = tj.multinomial(p, 20000, replacement=True)
    assert s.dtype is tj.int64 and tuple(s.shape) == (2, 20000)
    freq = np.stack([np.bincount(r, minlength=3) / 20000 for r in s.numpy()])
    np.testing.assert_allclose(freq, [[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]], atol=0.015)


def test_multinomial_without_replacement_is_a_permutation_of_the_support():
    tj.manual_seed(1)
    s = tj.multinomial(tj.tensor([1.0, 2.0, 0.0, 4.0]), 3)
    assert sorted(s.tolist()) == [0, 1, 3]
    # first draw follows p: index 3 first with probability 4/7
    tj.manual_seed(2)
    firsts = tj.multinomial(tj.tensor([[1.0, 2.0, 0.0, 4.0]] * 4000), 2)[:, 0].numpy()
    assert abs((firsts == 3).mean() - 4 / 7) < 0.03
    with pytest.raises(ValueError, match="without replacement"):
        tj.multinomial(tj.tensor([1.0, 0.0, 1.0]), 3)


def test_multinomial_one_sample_is_the_first_of_two():
    """One sample without replacement is the first of a longer draw from the same seed (the
    race's smallest key), zero-probability values never drawn, frequencies following p."""
    p = tj.tensor([[1.0, 2.0, 0.0, 4.0]] * 3000)
    tj.manual_seed(3)
    one = tj.multinomial(p, 1)
    tj.manual_seed(3)
    two = tj.multinomial(p, 2)
    assert one.dtype is tj.int64 and tuple(one.shape) == (3000, 1)
    np.testing.assert_array_equal(one.numpy()[:, 0], two.numpy()[:, 0])
    freq = np.bincount(one.numpy()[:, 0], minlength=4) / 3000
    np.testing.assert_allclose(freq, [1 / 7, 2 / 7, 0.0, 4 / 7], atol=0.03)
    assert tuple(tj.multinomial(tj.tensor([0.0, 3.0]), 1).tolist()) == (1,)


def test_multinomial_is_seeded_and_checks_input():
    tj.manual_seed(5)
    a = tj.multinomial(tj.ones(10), 5).tolist()
    tj.manual_seed(5)
    assert tj.ones(10).multinomial(5).tolist() == a
    with pytest.raises(ValueError, match="non-negative"):
        tj.multinomial(tj.tensor([1.0, -1.0]), 1)
    for bad in (float("nan"), float("inf"), -float("inf")):   # (each caught by the fused checks)
        with pytest.raises(ValueError, match="finite and non-negative"):
            tj.multinomial(tj.tensor([[1.0, 2.0], [bad, 1.0]]), 1, replacement=True)
    with pytest.raises(ValueError, match="positive sum"):
        tj.multinomial(tj.tensor([[1.0, 2.0], [0.0, 0.0]]), 1)
    s = tj.multinomial(tj.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]), 2, replacement=True)
    assert s.dtype is tj.int64 and s.tolist() == [[1, 1], [0, 0]]
    with pytest.raises(tj.errors.ShapeError, match="1-D or 2-D"):
        tj.multinomial(tj.ones(2, 2, 2), 1)


def test_multinomial_traced_draws_fresh_samples():
    f = tj.trace(lambda p: tj.multinomial(p, 8, replacement=True))
    p = tj.ones(4, 50)
    a, b = f(p).numpy(), f(p).numpy()
    assert a.shape == (4, 8) and not np.array_equal(a, b)


def test_sort_and_topk_return_named_pairs():
    x = tj.tensor([[3.0, 1.0, 2.0]])
    v, i = x.sort(descending=True)
    assert x.sort().values.tolist() == [[1.0, 2.0, 3.0]] and x.sort().indices.tolist() == [[1, 2, 0]]
    assert v.tolist() == [[3.0, 2.0, 1.0]] and i.tolist() == [[0, 2, 1]]
    assert x.topk(2).indices.tolist() == [[0, 2]]
    with pytest.raises(tj.errors.ShapeError, match="k \\(4\\)"):
        x.topk(4)


def test_descending_sort_along_a_leading_dim_keeps_ties_in_order_and_nan_first():
    # PyTorch's stable descending order: NaN first as the largest, equal values in input order
    x = np.array([[[1.0, 2.0], [np.nan, 2.0], [1.0, 5.0], [3.0, 2.0]]], np.float32).transpose(1, 0, 2)
    i = tj.argsort(tj.tensor(x), dim=0, descending=True)
    assert i[:, 0].tolist() == [[1, 2], [3, 0], [0, 1], [2, 3]]   # torch.sort(stable=True)'s
    v, j = tj.tensor(x).topk(3, dim=-3)   # (PyTorch leaves the order of ties open here)
    assert j[:, 0].tolist() == [[1, 2], [3, 0], [0, 1]]
    np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, j.numpy(), 0))


def test_einsum_errors_name_the_problem():
    with pytest.raises(ValueError, match="2 operand terms"):
        tj.einsum("ij,jk->ik", tj.ones(2, 2))
    with pytest.raises(tj.errors.ShapeError, match="label 'j'"):
        tj.einsum("ij,jk->ik", tj.ones(2, 3), tj.ones(4, 2))
    with pytest.raises(ValueError, match="output label"):
        tj.einsum("ij->k", tj.ones(2, 2))


def test_einsum_sublist_form_equals_the_equation_form():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    x, y = tj.tensor(a), tj.tensor(b)
    np.testing.assert_allclose(tj.einsum(x, [0, 1, 2], y, [2, 3], [0, 1, 3]).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(tj.einsum(x, [Ellipsis, 2], y, [2, 3]).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(tj.einsum(x, [0, 1, 2]).numpy(), np.einsum(a, [0, 1, 2]), rtol=1e-12)
    with pytest.raises(ValueError, match="ints in \\[0, 52\\) or Ellipsis, got 'i'"):
        tj.einsum(x, ["i", 1, 2])


def test_tensor_functions_compile_with_script():
    def f(q, k):
        att = tj.einsum("bqd,bkd->bqk", q, k)
        att = att + tj.triu(tj.ones(4, 4), 1) * -1e9
        top = att.topk(2, dim=-1).values.sum()
        return att.softmax(-1).cumsum(-1).sum() + top + att.sort(-1).values[..., 0].sum()

    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 3)).astype(np.float32)
    k = rng.standard_normal((2, 4, 3)).astype(np.float32)
    qe, ke = tj.tensor(q, requires_grad=True), tj.tensor(k, requires_grad=True)
    qs, ks = tj.tensor(q, requires_grad=True), tj.tensor(k, requires_grad=True)
    e = f(qe, ke)
    s = tj.script(f)(qs, ks)
    np.testing.assert_allclose(s.item(), e.item(), rtol=1e-5)
    e.backward()
    s.backward()
    np.testing.assert_allclose(qs.grad.numpy(), qe.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ks.grad.numpy(), ke.grad.numpy(), rtol=1e-4, atol=1e-5)


def _stable_order(x: np.ndarray, dim: int, largest: bool) -> np.ndarray:
    """The stable order along `dim` (ties in input order), largest first when asked."""
    key = -x if largest else x
    return np.argsort(key, axis=dim, kind="stable")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_a_small_k_is_the_stable_orders_head(dtype, dim, largest):
    # few distinct values: many ties, some across the k-th place; k a small part of the dim
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, (24, 30, 28)).astype(dtype)
    if dtype is np.float32:
        x = x + rng.standard_normal(x.shape).astype(dtype) * (rng.random(x.shape) < 0.5)
    x = x.transpose(1, 0, 2)   # a non-contiguous source
    assert x.size >= tensorfns.PARTIAL_SORT_SIZE
    v, i = tj.tensor(x).topk(5, dim=dim, largest=largest)
    want = np.take(_stable_order(x, dim, largest), np.arange(5), axis=dim)
    np.testing.assert_array_equal(i.numpy(), want)
    np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, want, dim))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape,dim", [((4, 65), 1), ((4, 65), 0), ((3, 5, 7), 1), ((6,), 0)])
def test_top_1_is_the_stable_orders_head(dtype, shape, dim):
    # ties (the first wins), a -0.0 beside 0.0, NaN as the largest (the first NaN wins)
    rng = np.random.default_rng(8)
    x = rng.integers(-2, 3, shape).astype(dtype)
    if dtype is not np.int64:
        x.flat[1] = -0.0
        if dtype is np.float32:
            x.flat[3] = x.flat[-1] = np.nan
    for largest in (True, False):
        for _ in range(2):   # (the first call plans the signature; the second runs the plan)
            v, i = tj.tensor(x).topk(1, dim=dim, largest=largest)
        want = np.take(tj.tensor(x).sort(dim, descending=largest).indices.numpy(), [0], axis=dim)
        np.testing.assert_array_equal(i.numpy(), want)
        np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, want, dim))
        torch = pytest.importorskip("torch")
        np.testing.assert_array_equal(v.numpy(), torch.tensor(x).topk(1, dim, largest).values.numpy())


def test_topk_values_and_gradient_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((40, 500)).astype(np.float32)   # distinct: the partial sort's
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    tv, ti = tx.topk(7, dim=1)
    jv, ji = jx.topk(7, dim=1)
    np.testing.assert_array_equal(jv.detach().numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(ji.numpy(), ti.numpy())   # (no ties: one order)
    w = rng.standard_normal((40, 7)).astype(np.float32)
    (tv * torch.tensor(w)).sum().backward()
    (jv * tj.tensor(w)).sum().backward()
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())


def test_topk_with_nan_empty_and_whole_dim():
    x = np.array([[1.0, np.nan, 3.0] + [0.0] * 9], np.float32)
    v, i = tj.tensor(x).topk(2)
    assert i.tolist() == [[1, 2]] and np.isnan(v.numpy()[0, 0])   # NaN as the largest
    assert tuple(tj.tensor(x).topk(0).values.shape) == (1, 0)
    assert tj.tensor(x[:, :3]).topk(3, largest=False).indices.tolist() == [[0, 2, 1]]
    assert tuple(tj.zeros(0, 40).topk(2).indices.shape) == (0, 2)
    big = np.random.default_rng(9).standard_normal((4, 5000)).astype(np.float32)
    big[2, 4000] = np.nan
    i = tj.tensor(big).topk(3).indices.numpy()
    want = _stable_order(np.nan_to_num(big, nan=np.inf), 1, True)[:, :3]   # NaN as the largest
    np.testing.assert_array_equal(i, want)
    assert i[2, 0] == 4000


@pytest.mark.parametrize("dtype", ["int32", "int16", "bool"])
def test_cumprod_of_a_0d_integer_tensor_is_int64(dtype):
    torch = pytest.importorskip("torch")
    got = tj.cumprod(tj.tensor(3, dtype=getattr(tj, dtype)), 0)
    ref = torch.cumprod(torch.tensor(3, dtype=getattr(torch, dtype)), 0)
    assert got.dtype is tj.int64 and ref.dtype is torch.int64 and got.item() == ref.item()


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64", "float16", "float32"])
@pytest.mark.parametrize("fn,diagonal", [("triu", 1), ("tril", 0), ("triu", -1), ("tril", -2), ("tril", 3),
                                         ("triu", 6), ("triu", -5), ("tril", -4)])
def test_tri_keeps_the_dtype(dtype, fn, diagonal):
    # PyTorch's triu/tril keep the input's dtype: a boolean causal mask stays boolean
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).integers(0, 2, (2, 4, 5)).astype(dtype)
    want = getattr(torch, fn)(torch.from_numpy(x), diagonal)
    got = getattr(tj, fn)(tj.tensor(x), diagonal)
    assert got.dtype.name == str(want.dtype).replace("torch.", "")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("row", [[-0.0, -0.0, -np.inf, 0.0], [0.0, -1.0, -np.inf], [np.inf, 2.0, 0.0, 5.0],
                                 [2.0, 0.0, 3.0, 0.0, 4.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
def test_cumprod_gradient_beside_zeros_and_infs_matches_pytorch(row):
    """Past a row's first zero the gradient is 0 and at it a product of the factors around
    it: an inf there gives PyTorch's value, not 0 * inf = nan."""
    torch = pytest.importorskip("torch")
    g = np.array([-1.0, 0.5, 1.0, -1.0, 2.0][:len(row)])
    for dim, shape in ((0, (-1,)), (1, (-1, 1))):     # (along a size-1 dim: the identity)
        grads = []
        for lib in (torch, tj):
            x = lib.tensor(np.array(row).reshape(shape), requires_grad=True)
            (x.cumprod(dim) * lib.tensor(g.reshape(shape))).sum().backward()
            grads.append(x.grad.numpy())
        np.testing.assert_array_equal(grads[1], grads[0])


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("zero", [False, True])
def test_cumprod_gradient_along_a_middle_dim_matches_pytorch(dtype, rtol, zero):
    """Without zeros the gradient takes the division form alone; one zero anywhere takes
    the picked form for the whole tensor: both give PyTorch's values."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    a = (1 + 0.1 * rng.standard_normal((3, 40, 5))).astype(dtype)
    if zero:
        a[1, 7, 2] = 0.0
    g = rng.standard_normal(a.shape).astype(dtype)
    grads = []
    for lib in (torch, tj):
        x = lib.tensor(a, requires_grad=True)
        x.cumprod(1).backward(lib.tensor(g))
        grads.append(x.grad.numpy())
    assert grads[1].dtype == dtype
    np.testing.assert_allclose(grads[1], grads[0], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("row", [[2.0, 0.0, 3.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.0], [2.0, 0.0, 3.0, 0.0, 5.0],
                                 [0.0, -1.0, 0.0, 0.0], [1.5, -2.0, 0.5]])
def test_cumprod_second_derivative_beside_zeros_matches_pytorch(row):
    """create_graph differentiates a gradient past and between zeros (the factor a zero
    contributes is not a picked constant there)."""
    torch = pytest.importorskip("torch")
    g, w = np.arange(1.0, len(row) + 1), np.arange(len(row)) * 0.5 + 1
    got = []
    for lib in (torch, tj):
        x = lib.tensor(np.array([row, row[::-1]]).T, requires_grad=True)
        (gx,) = lib.autograd.grad((x.cumprod(0) * lib.tensor(g[:, None])).sum(), x, create_graph=True)
        (ggx,) = lib.autograd.grad((gx * lib.tensor(w[:, None])).sum(), x)
        got.append((gx.detach().numpy(), ggx.numpy()))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("fn", ["tril", "triu"])
def test_tri_of_a_diagonal_computed_from_a_growing_dim_compiles_once_symbolic(fn):
    # A causal mask over a key/value cache, tril(diagonal=L - T): the diagonal follows the
    # cache's length, so it must stay symbolic rather than recompile at every length
    def f(q, k):
        T, L = q.size(0), k.size(0)
        return getattr(tj.ones(T, L, dtype=tj.bool), fn)(diagonal=L - T)

    g = tj.compile(f)
    for L in range(3, 9):
        q, k = tj.ones(2), tj.ones(L)
        want = getattr(np, fn)(np.ones((2, L), bool), k=L - 2)
        np.testing.assert_array_equal(g(q, k).numpy(), want)
    assert g.cache_stats()["compiles"] == 2


def test_topk_by_a_changing_int_k_captures_twice():
    """``x.topk(k)`` with a new k each call: k a symbolic output size in one capture, with
    PyTorch's values, indices and gradients; a k past the dim raises as eagerly."""
    torch = pytest.importorskip("torch")
    f = lambda x, k: x.topk(k, -1)   # noqa: E731
    cf = tj.compile(f)
    v = np.random.default_rng(0).standard_normal((3, 10))
    for k in (2, 3, 5, 7, 10):
        x, xt = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        (val, idx), (tval, tidx) = cf(x, k), f(xt, k)
        np.testing.assert_array_equal(val.detach().numpy(), tval.detach().numpy())
        np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
        (val * val).sum().backward(), (tval * tval).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
    with pytest.raises(tj.errors.ShapeError, match=r"topk: k \(11\) is out of range"):
        cf(tj.tensor(v), 11)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "float64", "int64"])
@pytest.mark.parametrize("shape, dim", [((5, 433), 1), ((337, 3, 4), 0), ((2, 9, 130), 1), ((9,), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_with_ties_nan_and_signed_zeros_is_pytorchs(dtype, shape, dim, descending):
    # (32-bit and narrower floats and int32 of 2048 values and more sort packed keys; the
    # 64-bit dtypes and the small (9,) a merge sort)
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(sum(shape) + dim)
    a = rng.integers(-4, 5, shape).astype(dtype)
    if a.dtype.kind == "f":
        flat = a.reshape(-1)
        flat[::5], flat[1::7], flat[2::11], flat[3::13] = np.nan, -0.0, np.inf, -np.inf
    for x in (a, rng.standard_normal(shape).astype(dtype) if a.dtype.kind == "f" else a[::-1].copy()):
        want = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
        got = tj.sort(tj.tensor(x), dim=dim, descending=descending, stable=True)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        assert (np.signbit(got.values.numpy()) == np.signbit(want.values.numpy())).all()
        idx = tj.argsort(tj.tensor(x), dim, descending).numpy()
        np.testing.assert_array_equal(idx, want.indices.numpy())


@pytest.mark.parametrize("fn", ["tril", "triu"])
def test_tri_masks_kept_between_calls_give_pytorchs_values_and_stay_unwritten(fn):
    torch = pytest.importorskip("torch")
    x = np.arange(1.0, 21.0, dtype=np.float32).reshape(4, 5)
    for diagonal in (0, 2, -1, 0, 2):   # (each mask made once, then kept)
        got = getattr(tj.tensor(x), fn)(diagonal)
        want = getattr(torch.tensor(x), fn)(diagonal)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        got.numpy()[...] = -7.0   # the result is the caller's own memory, not the kept mask
    ones = tj.ones(4, 5, dtype=tj.bool)
    first = getattr(ones, fn)(1)
    first.numpy()[...] = False
    np.testing.assert_array_equal(getattr(ones, fn)(1).numpy(),
                                  getattr(torch.ones(4, 5, dtype=torch.bool), fn)(1).numpy())
    assert not any(m.flags.writeable for m in tensorfns._TRI.values())
