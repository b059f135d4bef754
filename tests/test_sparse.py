"""Sparse COO tensors against PyTorch: construction, coalescing (duplicates summed),
to_dense/to_sparse round trips, sparse @ dense with gradients to both operands, the
transpose, sums, a compiled function guarding on its sparse argument, and the errors."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

IDX = [[0, 1, 1, 2, 0], [2, 0, 2, 1, 2]]
VAL = [3.0, 4.0, 5.0, 6.0, 1.0]


def _pair():
    return (tj.sparse_coo_tensor(tj.tensor(IDX), tj.tensor(VAL), (3, 3)),
            torch.sparse_coo_tensor(torch.tensor(IDX), torch.tensor(VAL), (3, 3)))


def test_coalesce_to_dense_and_to_sparse_match_torch():
    s, t = _pair()
    assert s.is_sparse and not s.is_coalesced() and s._nnz() == 5
    with pytest.raises(RuntimeError, match="coalesce"):
        s.indices()
    c, tc = s.coalesce(), t.coalesce()
    np.testing.assert_array_equal(c.indices().numpy(), tc.indices().numpy())
    np.testing.assert_array_equal(c.values().numpy(), tc.values().numpy())
    np.testing.assert_array_equal(s.to_dense().numpy(), t.to_dense().numpy())
    d = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    sp, tsp = tj.tensor(d).to_sparse(), torch.tensor(d).to_sparse()
    np.testing.assert_array_equal(sp.indices().numpy(), tsp.indices().numpy())
    np.testing.assert_array_equal(sp.values().numpy(), tsp.values().numpy())
    np.testing.assert_array_equal(s.t().to_dense().numpy(), t.t().to_dense().numpy())
    assert tj.sparse.sum(s).item() == torch.sparse.sum(t).item() == 19.0


@pytest.mark.parametrize("form", ["sparse.mm", "spmm", "matmul_operator", "mm"])
def test_products_and_gradients_match_torch(form):
    x = np.random.default_rng(0).standard_normal((3, 4))
    out = []
    for lib in (tj, torch):
        vals = lib.tensor(VAL, dtype=lib.float64, requires_grad=True)
        s = lib.sparse_coo_tensor(lib.tensor(IDX), vals, (3, 3))
        xt = lib.tensor(x, requires_grad=True)
        y = {"sparse.mm": lambda: lib.sparse.mm(s, xt), "spmm": lambda: lib.spmm(s, xt),
             "matmul_operator": lambda: s @ xt, "mm": lambda: lib.mm(s, xt)}[form]()
        (y * y).sum().backward()
        out.append((y.detach().numpy(), xt.grad.numpy(), vals.grad.numpy()))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_compiled_function_guards_on_the_sparse_argument():
    s, _ = _pair()
    s2 = tj.sparse_coo_tensor(tj.tensor([[0, 2], [1, 0]]), tj.tensor([2.0, -1.0]), (3, 3))
    w = tj.randn(3, 2)
    f = tj.compile(lambda a, x: tj.spmm(a, x @ w).relu().sum(0))
    x = tj.randn(3, 3)
    for a in (s, s, s2, s):
        np.testing.assert_allclose(f(a, x).numpy(), tj.spmm(a, x @ w).relu().sum(0).numpy(), rtol=1e-6)


def test_bad_sparse_input_is_named():
    with pytest.raises(RuntimeError, match="out of bounds"):
        tj.sparse_coo_tensor(tj.tensor([[0, 3]]), tj.tensor([1.0, 2.0]), (3,))
    with pytest.raises(RuntimeError, match="2 nonzeros but values have shape"):
        tj.sparse_coo_tensor(tj.tensor([[0, 1]]), tj.tensor([1.0]), (3,))
    s, _ = _pair()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        tj.sparse.mm(s, tj.ones(4, 2))
