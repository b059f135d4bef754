"""tracejit.linalg.ldl_factor / ldl_factor_ex / ldl_solve (tracejit/ops/linalg_ldl.py)
against PyTorch: LD and pivots (LAPACK's packing, 2 x 2 pivots included) equal on fixed
matrices, solves, gradients of the solve (to B: A^-1 G; to LD: central differences),
info and the errors."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

R = np.random.default_rng(0)


def _sym(shape, small_diag=False):
    a = R.standard_normal(shape)
    a = a + np.swapaxes(a, -1, -2)
    if small_diag:      # small diagonal entries force 2 x 2 pivots
        n = shape[-1]
        a[..., np.arange(n), np.arange(n)] *= 1e-3
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, small", [((1, 1), False), ((4, 4), False), ((5, 5), True), ((3, 6, 6), True),
                                          ((2, 2, 9, 9), False), ((40, 40), True)])
def test_factor_and_solve_match_torch(shape, small, dtype):
    a = _sym(shape, small).astype(dtype)
    b = R.standard_normal(shape[:-1] + (2,)).astype(dtype)
    want_ld, want_piv = torch.linalg.ldl_factor(torch.tensor(a))
    ld, piv = tj.linalg.ldl_factor(tj.tensor(a))
    assert piv.dtype == tj.int32 and ld.dtype == getattr(tj, dtype)
    np.testing.assert_array_equal(piv.numpy(), want_piv.numpy())
    rtol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(ld.numpy(), want_ld.numpy(), rtol=rtol, atol=rtol)
    want_x = torch.linalg.ldl_solve(want_ld, want_piv, torch.tensor(b))
    x = tj.linalg.ldl_solve(ld, piv, tj.tensor(b))
    scale = np.abs(want_x.numpy()).max()
    np.testing.assert_allclose(x.numpy(), want_x.numpy(), atol=(1e-9 if dtype == "float64" else 2e-3) * scale)
    if small:
        assert (piv.numpy() < 0).any()          # the 2 x 2 path ran


def test_factor_reads_the_lower_triangle_and_hermitian_is_accepted():
    a = _sym((5, 5), True)
    junk = a + np.triu(R.standard_normal((5, 5)), 1)
    ld, piv = tj.linalg.ldl_factor(tj.tensor(junk), hermitian=True)
    want_ld, want_piv = torch.linalg.ldl_factor(torch.tensor(a))
    np.testing.assert_allclose(ld.numpy(), want_ld.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(piv.numpy(), want_piv.numpy())


def test_solve_gradients():
    a, b = _sym((2, 5, 5), True), R.standard_normal((2, 5, 3))
    w = R.standard_normal((2, 5, 3))
    ld, piv = tj.linalg.ldl_factor(tj.tensor(a))
    ldr, br = ld.detach().requires_grad_(), tj.tensor(b, requires_grad=True)
    g_ld, g_b = tj.autograd.grad((tj.linalg.ldl_solve(ldr, piv, br) * tj.tensor(w)).sum(), [ldr, br])
    np.testing.assert_allclose(g_b.numpy(), np.linalg.solve(a, w), rtol=1e-9, atol=1e-12)

    def f(l):
        return (tj.linalg.ldl_solve(tj.tensor(l), piv, tj.tensor(b)).numpy() * w).sum()
    l0, h = ld.numpy(), 1e-6
    for idx in [(0, 3, 1), (1, 4, 4), (1, 2, 0), (0, 1, 0), (0, 0, 3)]:
        lp, lm = l0.copy(), l0.copy()
        lp[idx] += h
        lm[idx] -= h
        np.testing.assert_allclose(g_ld.numpy()[idx], (f(lp) - f(lm)) / (2 * h), rtol=1e-5, atol=1e-8)


def test_factor_ex_info_and_singular_errors():
    zero = np.zeros((2, 2))
    want = torch.linalg.ldl_factor_ex(torch.tensor(zero))
    got = tj.linalg.ldl_factor_ex(tj.tensor(zero))
    assert int(got.info) == int(want.info) == 1 and got.info.dtype == tj.int32
    np.testing.assert_array_equal(got.pivots.numpy(), want.pivots.numpy())
    ok = tj.linalg.ldl_factor_ex(tj.tensor(_sym((3, 4, 4))))
    assert ok.info.numpy().tolist() == [0, 0, 0]
    for call in (lambda: tj.linalg.ldl_factor(tj.tensor(zero)),
                 lambda: tj.linalg.ldl_factor_ex(tj.tensor(zero), check_errors=True)):
        with pytest.raises(tj.linalg.LinAlgError, match="singular"):
            call()
    assert issubclass(tj.linalg.LinAlgError, RuntimeError)


def test_bad_arguments():
    ld, piv = tj.linalg.ldl_factor(tj.tensor(_sym((4, 4))))
    b = tj.tensor(R.standard_normal((4, 2)))
    with pytest.raises(ValueError, match="square"):
        tj.linalg.ldl_factor(tj.zeros(2, 3))
    with pytest.raises(TypeError, match="floating point"):
        tj.linalg.ldl_factor(tj.zeros(3, 3, dtype=tj.int64))
    with pytest.raises(TypeError, match="hermitian"):
        tj.linalg.ldl_factor(tj.eye(3), hermitian=1)
    with pytest.raises(ValueError, match="B matrix is 3 by 2"):
        tj.linalg.ldl_solve(ld, piv, tj.zeros(3, 2, dtype=tj.float64))
    with pytest.raises(ValueError, match="B must be a batch of matrices"):
        tj.linalg.ldl_solve(ld, piv, tj.zeros(4, dtype=tj.float64))
    with pytest.raises(ValueError, match="pivots"):
        tj.linalg.ldl_solve(ld, piv.float(), b)
    with pytest.raises(TypeError, match="dtype"):
        tj.linalg.ldl_solve(ld, piv, b.float())


def test_factor_has_no_derivative_as_in_torch():
    a = tj.tensor(_sym((3, 3)), requires_grad=True)
    ld, _ = tj.linalg.ldl_factor(a)
    with pytest.raises(NotImplementedError, match="ldl_factor"):
        ld.sum().backward()
