"""linalg.eig/eigvals (complex results and their gradient), the LU family's argument errors and results'
forms, and the SVD's gradient through the nuclear norm (values and gradients of the
rest are in tests/opdb_linalg_factor.py)."""
import numpy as np
import pytest

import tracejit as tj


def test_eig_gives_complex_eigenpairs():
    a = np.array([[0.0, -1.0, 0.5], [1.0, 0.0, 0.2], [0.0, 0.3, 2.0]])
    w, v = tj.linalg.eig(tj.tensor(a))
    assert w.dtype == tj.complex128 and v.dtype == tj.complex128
    np.testing.assert_allclose(a @ v.numpy(), v.numpy() * w.numpy()[None, :], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(v.numpy(), axis=0), 1.0, rtol=1e-12)
    ev = tj.linalg.eigvals(tj.tensor(a, dtype=tj.float32))
    assert ev.dtype == tj.complex64
    np.testing.assert_allclose(np.sort_complex(ev.numpy()), np.sort_complex(np.linalg.eigvals(a)), atol=1e-5)


def test_eigvals_gradient_by_finite_differences():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3))

    def f(m):
        w = np.linalg.eigvals(m)
        return float((w.real ** 2 + 3 * w.imag).sum())
    t = tj.tensor(a, requires_grad=True)
    w = tj.linalg.eigvals(t)
    (tj.real(w) ** 2 + 3 * tj.imag(w)).sum().backward()
    eps = 1e-6
    fd = np.array([(f(a + eps * e.reshape(3, 3)) - f(a - eps * e.reshape(3, 3))) / (2 * eps)
                   for e in np.eye(9)]).reshape(3, 3)
    np.testing.assert_allclose(t.grad.numpy(), fd, atol=1e-6)


def test_lu_factor_ex_info_and_pivots():
    a = tj.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=tj.float64)
    lu, piv, info = tj.linalg.lu_factor_ex(a)
    assert piv.dtype == tj.int32 and piv.tolist() == [2, 2] and info.item() == 0
    p, lo, up = tj.linalg.lu_unpack(lu, piv)
    np.testing.assert_allclose((p @ lo @ up).numpy(), a.numpy())
    assert tj.linalg.lu_factor_ex(tj.zeros(2, 2)).info.item() == 1
    with pytest.raises(RuntimeError, match="singular"):
        tj.linalg.lu_factor_ex(tj.zeros(2, 2), check_errors=True)


def test_linalg_argument_errors_name_the_argument():
    a = tj.randn(3, 3)
    with pytest.raises(TypeError, match="upper must be a bool"):
        tj.linalg.solve_triangular(a, a, upper=None)
    with pytest.raises(tj.errors.ShapeError, match="square"):
        tj.linalg.solve_triangular(tj.randn(3, 2), a, upper=True)
    with pytest.raises(NotImplementedError, match="pivot=False"):
        tj.linalg.lu_factor(a, pivot=False)
    with pytest.raises(tj.errors.ShapeError, match="square"):
        tj.linalg.matrix_exp(tj.randn(2, 3))
    with pytest.raises(TypeError, match="floating point"):
        tj.linalg.matrix_exp(tj.tensor([[1, 2], [3, 4]]))
    with pytest.raises(tj.errors.ShapeError, match="householder_product"):
        tj.linalg.householder_product(tj.randn(2, 3), tj.randn(2))


def test_legacy_spellings():
    a = tj.tensor([[2.0, 0.0], [1.0, 4.0]], dtype=tj.float64)
    b = tj.tensor([[2.0], [9.0]], dtype=tj.float64)
    x, coeff = tj.triangular_solve(b, a, upper=False)
    np.testing.assert_allclose(x.numpy(), [[1.0], [2.0]])
    assert coeff.tolist() == a.tolist()
    lu, piv = tj.lu(a)
    np.testing.assert_allclose(tj.lu_solve(b, lu, piv).numpy(), [[1.0], [2.0]])
    np.testing.assert_allclose(tj.matrix_exp(tj.zeros(2, 2)).numpy(), np.eye(2))


def test_nuclear_norm_gradient_is_u_vt():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3))
    t = tj.tensor(a, requires_grad=True)
    tj.linalg.matrix_norm(t, "nuc").backward()
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(t.grad.numpy(), u @ vt, atol=1e-12)
