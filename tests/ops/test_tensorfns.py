"""multinomial (random, so not in the op database), and the tensor functions of
tracejit/ops/tensorfns.py and einsum.py under tracing; values are covered by
tests/opdb_tensorfns.py."""
import numpy as np
import pytest

import tracejit as tj


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


def test_multinomial_is_seeded_and_checks_input():
    tj.manual_seed(5)
    a = tj.multinomial(tj.ones(10), 5).tolist()
    tj.manual_seed(5)
    assert tj.ones(10).multinomial(5).tolist() == a
    with pytest.raises(ValueError, match="non-negative"):
        tj.multinomial(tj.tensor([1.0, -1.0]), 1)
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
