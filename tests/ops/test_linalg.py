"""Products of ops/linalg.py against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("x_shape,w_shape", [((4, 3, 2), (0, 2)), ((4, 3, 0), (5, 0)), ((0, 3, 2), (5, 2))])
def test_linear_backward_with_a_zero_size_dim(compiled, x_shape, w_shape):
    """A layer of no output features (or no inputs) over a 3-D input: the weight's gradient
    flattened the leading dims as (-1, 0), which cannot be inferred."""
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal(x_shape), rng.standard_normal(w_shape)

    def run(m, f):
        x = m.tensor(xa, requires_grad=True)
        w = m.tensor(wa, requires_grad=True)
        f(x, w).backward()
        return x.grad.numpy(), w.grad.numpy()
    f = (lambda x, w: (tj.nn.functional.linear(x, w) * 2).sum())
    got = run(tj, tj.compile(f) if compiled else f)
    want = run(torch, lambda x, w: (torch.nn.functional.linear(x, w) * 2).sum())
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-10)


def test_ger_is_outer_as_function_and_method():
    """torch.ger, the deprecated spelling Transformer-XL's positional encoding calls."""
    a, b = np.arange(1.0, 4.0), np.array([0.5, -2.0])
    want = torch.ger(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_array_equal(tj.ger(tj.tensor(a), tj.tensor(b)).numpy(), want)
    np.testing.assert_array_equal(tj.tensor(a).ger(tj.tensor(b)).numpy(), want)


_R = np.random.default_rng(5)
GROUPED = {   # (mat_a, mat_b, offs): the MoE forms PyTorch's grouped_mm takes
    "rows": (_R.standard_normal((24, 16)), _R.standard_normal((3, 16, 8)), [5, 13, 20]),
    "batch": (_R.standard_normal((3, 8, 16)), _R.standard_normal((3, 16, 8)), None),
    "contraction": (_R.standard_normal((8, 24)), _R.standard_normal((24, 8)), [8, 16, 24]),
    "columns": (_R.standard_normal((3, 8, 16)), _R.standard_normal((16, 24)), [8, 16, 24]),
}


@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_mm_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    a, b, offs = (v if v is None or isinstance(v, list) else v.astype(np.float32) for v in GROUPED[case])
    got, want = (m.nn.functional.grouped_mm(m.tensor(a), m.tensor(b), **({} if offs is None else
                                            {"offs": m.tensor(offs, dtype=m.int32)})).numpy() for m in (tj, torch))
    n = 20 if case == "rows" else len(got)   # (PyTorch leaves rows past the last group unset)
    np.testing.assert_allclose(got[:n], want[:n], rtol=1e-5, atol=1e-5)
    if case == "rows":
        assert got.shape == want.shape and not got[20:].any()
        at = tj.tensor(a, requires_grad=True)
        tj.nn.functional.grouped_mm(at, tj.tensor(b), offs=tj.tensor(offs, dtype=tj.int32)).sum().backward()
        np.testing.assert_allclose(at.grad.numpy()[:5], np.tile(b[0].sum(-1), (5, 1)), rtol=1e-5, atol=1e-5)
        with pytest.raises(TypeError, match="int32"):
            tj.nn.functional.grouped_mm(tj.tensor(a), tj.tensor(b), offs=tj.tensor(offs))
        with pytest.raises(ValueError, match="offs"):
            tj.nn.functional.grouped_mm(tj.tensor(a), tj.tensor(b))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("m,k,lead,n", [(4, 6, (5,), 1), (3, 3, (2, 7), 1), (6, 5, (4,), 2), (3, 4, (4,), 9)])
def test_a_matrix_by_a_batch_gets_torchs_gradients(compiled, x_grad, m, k, lead, n):
    """``w @ x`` of a 2-D w and an N-d x (with or without its own gradient): the gradients
    as PyTorch's, whether w's folds the batch into one product (few columns) or sums the
    per-index ones (many)."""
    rng = np.random.default_rng(1)
    wa, xa = rng.standard_normal((m, k)), rng.standard_normal(lead + (k, n))
    ga = rng.standard_normal(lead + (m, n))

    def run(lib, f):
        w, x = lib.tensor(wa, requires_grad=True), lib.tensor(xa, requires_grad=x_grad)
        (f(w, x) * lib.tensor(ga)).sum().backward()
        return (w.grad.numpy(),) + ((x.grad.numpy(),) if x_grad else ())
    f = lambda w, x: w @ x
    got, want = run(tj, tj.compile(f) if compiled else f), run(torch, f)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("x_grad", [True, False])
def test_a_matrix_gradient_over_a_batch_of_columns_is_one_product(monkeypatch, x_grad):
    """The gradient of w in ``w @ x`` (x a batch of columns) is one (m, k) product, never
    the (L, m, k) per-index products summed afterwards."""
    from tracejit.ops import linalg
    shapes = []
    for name in ("_mm_nt", "_mm_tn"):
        real = getattr(linalg, name)
        monkeypatch.setattr(linalg, name, lambda a, b, real=real: shapes.append(tuple((r := real(a, b)).shape)) or r)
    w = tj.tensor(np.ones((4, 8), np.float32), requires_grad=True)
    x = tj.tensor(np.ones((16, 8, 1), np.float32), requires_grad=x_grad)
    (w @ x).sum().backward()
    assert (4, 8) in shapes and (16, 4, 8) not in shapes
    np.testing.assert_array_equal(w.grad.numpy(), np.full((4, 8), 16.0, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("m,k,lead", [(3, 3, (40,)), (4, 6, (2, 5)), (5, 1, (3,)), (2, 3, (0,)), (4, 0, (3,))])
def test_a_matrix_by_a_batch_of_columns_is_torchs(dtype, m, k, lead):
    """``w @ x`` of a 2-D w and a batch of single columns (run as one product of the
    columns as rows): torch's values, shape and dtype, for a strided x too."""
    rng = np.random.default_rng(2)
    wa = (rng.standard_normal((m, k)) * 4).astype(dtype)
    xa = (rng.standard_normal(lead + (k, 3)) * 4).astype(dtype)
    for cols in (xa[..., :1], np.ascontiguousarray(xa[..., 1:2])):
        got = (tj.tensor(wa) @ tj.tensor(cols)).numpy()
        want = (torch.tensor(wa) @ torch.tensor(cols)).numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_matrix_by_a_batch_of_columns_is_one_2d_product(monkeypatch):
    """The batch's columns go to BLAS as the rows of one 2-D product (numpy's stacked
    matmul would run a matrix-vector product per batch index)."""
    from tracejit.compiler.cpu.gemm import products
    from tracejit.ops import linalg
    seen = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b, **k: seen.append((a.ndim, b.ndim)) or real(a, b, **k))
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = np.arange(4 * 37, dtype=np.float32).reshape(37, 4, 1)
    for f in (lambda: tj.tensor(w) @ tj.tensor(x), lambda: products.matmul(w, x),
              lambda: tj.tensor(w.T.copy()).T @ tj.tensor(x)):
        seen.clear()
        np.testing.assert_array_equal(np.asarray(f()), real(w, x))
        assert seen and all(s == (2, 2) for s in seen)
    np.testing.assert_array_equal(linalg.matmul_cols(real, w, x), real(w, x))
