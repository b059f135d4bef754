"""Edges, dtypes and argument handling of zeta, the incomplete gamma functions, the
Bessel/Airy functions and the orthogonal polynomials (values against independent
references are in tests/opdb_special_more.py)."""
import math

import numpy as np
import pytest

import tracejit as tj


def test_zeta_domain_edges_and_gradient_in_q():
    s = tj.tensor([1.0, 0.5, 2.0, 2.5, 2.0], dtype=tj.float64)
    q = tj.tensor([1.0, 1.0, 0.0, -1.5, 1.0], dtype=tj.float64)
    out = tj.special.zeta(s, q).numpy()
    assert out[0] == np.inf and np.isnan(out[1]) and out[2] == np.inf and np.isnan(out[3])
    np.testing.assert_allclose(out[4], math.pi ** 2 / 6, rtol=1e-14)
    qq = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    tj.special.zeta(tj.tensor([2.0, 3.0], dtype=tj.float64), qq).sum().backward()
    # d/dq zeta(s, q) = -s zeta(s + 1, q); zeta(3, 1) = 1.2020569..., zeta(4, 2) = pi^4/90 - 1
    np.testing.assert_allclose(qq.grad.numpy(), [-2 * 1.2020569031595942, -3 * (math.pi ** 4 / 90 - 1)], rtol=1e-12)


def test_zeta_and_igamma_refuse_the_first_arguments_gradient():
    s = tj.tensor([2.0], requires_grad=True)
    with pytest.raises(NotImplementedError, match="zeta.*first argument"):
        tj.special.zeta(s, tj.tensor([1.0])).sum().backward()
    a = tj.tensor([2.0], requires_grad=True)
    with pytest.raises(NotImplementedError, match="igamma.*first argument"):
        tj.igamma(a, tj.tensor([1.0])).sum().backward()


def test_igamma_edges_and_complement():
    a = tj.tensor([1.0, 2.0, 3.0, 0.0, -1.0], dtype=tj.float64)
    x = tj.tensor([0.0, float("inf"), 2.5, 1.0, 1.0], dtype=tj.float64)
    p, q = tj.igamma(a, x).numpy(), tj.igammac(a, x).numpy()
    assert p[0] == 0 and p[1] == 1 and p[3] == 1 and np.isnan(p[4])
    np.testing.assert_allclose(p[2], 1 - math.exp(-2.5) * (1 + 2.5 + 2.5 ** 2 / 2), rtol=1e-13)
    np.testing.assert_allclose(p[:4] + q[:4], 1.0, rtol=1e-14)
    assert tj.special.gammainc(tj.tensor([1.0]), tj.tensor([1.0])).dtype == tj.float32


def test_bessel_edges_follow_pytorch():
    x = tj.tensor([0.0, -1.0], dtype=tj.float64)
    for name, at0 in (("bessel_y0", -np.inf), ("bessel_y1", -np.inf), ("modified_bessel_k0", np.inf),
                      ("modified_bessel_k1", np.inf), ("scaled_modified_bessel_k0", np.inf)):
        out = getattr(tj.special, name)(x).numpy()
        assert out[0] == at0 and np.isnan(out[1]), name
    assert tj.special.bessel_j0(tj.tensor([0.0])).item() == 1.0
    np.testing.assert_allclose(tj.special.airy_ai(tj.tensor([0.0], dtype=tj.float64)).item(), 0.3550280538878172)
    np.testing.assert_allclose(tj.special.modified_bessel_i0(tj.tensor([1.0], dtype=tj.float64)).item(),
                               1.2660658777520082, rtol=1e-14)
    assert tj.special.spherical_bessel_j0(tj.tensor([0.0])).item() == 1.0


def test_bessel_results_do_not_require_grad():
    x = tj.tensor([0.5, 2.0], requires_grad=True)
    assert not tj.special.bessel_j0(x).requires_grad
    assert not tj.special.chebyshev_polynomial_t(x, 3).requires_grad


def test_polynomials_take_tensor_degrees_and_truncate():
    x = tj.tensor([0.5, 0.5, 0.5, 2.0], dtype=tj.float64)
    n = tj.tensor([-1, 0, 2, 3])
    np.testing.assert_allclose(tj.special.chebyshev_polynomial_t(x, n).numpy(), [0.0, 1.0, -0.5, 26.0])
    np.testing.assert_allclose(tj.special.legendre_polynomial_p(x, 2.7).numpy(), (3 * x.numpy() ** 2 - 1) / 2)
    assert tj.special.hermite_polynomial_h(tj.tensor([1.0]), 2).dtype == tj.float32
    with pytest.raises(TypeError, match="chebyshev_polynomial_u"):
        tj.special.chebyshev_polynomial_u(0.5, 2)


def test_k0_k1_and_spherical_j0_at_infinity_and_nan_as_pytorch():
    torch = pytest.importorskip("torch")
    x = [float("inf"), float("nan"), 0.0, 2.0]
    for name in ("modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
                 "scaled_modified_bessel_k1", "spherical_bessel_j0"):
        want = getattr(torch.special, name)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(getattr(tj.special, name)(tj.tensor(x)).numpy(), want, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_airy_ai_at_the_infinities_is_pytorchs_nan(dtype):
    torch = pytest.importorskip("torch")
    v = [math.inf, -math.inf, math.nan, 150.0, 2.0, -3.0]
    got = tj.special.airy_ai(tj.tensor(v, dtype=getattr(tj, dtype))).numpy()
    want = torch.special.airy_ai(torch.tensor(v, dtype=getattr(torch, dtype))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30, equal_nan=True)
    assert np.isnan(got[:3]).all()
