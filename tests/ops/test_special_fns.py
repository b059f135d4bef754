"""frexp/ldexp, polygamma's argument checks and the Tensor-method spellings of the
special functions (values and gradients are in tests/opdb_special_fns.py)."""
import numpy as np
import pytest

import tracejit as tj


def test_frexp_splits_into_mantissa_and_int32_exponent():
    x = tj.tensor([-1.5, 0.0, 0.3, 8.0, 1e-30])
    m, e = tj.frexp(x)
    assert e.dtype == tj.int32 and m.dtype == tj.float32
    np.testing.assert_array_equal(e.numpy(), [1, 0, -1, 4, -99])
    np.testing.assert_allclose(m.numpy() * 2.0 ** e.numpy(), x.numpy(), rtol=1e-7)
    assert m.abs().max().item() < 1.0 and x.frexp().exponent.tolist() == e.tolist()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_frexp_of_a_tensor_requiring_grad_matches_pytorch(dtype):
    torch = pytest.importorskip("torch")
    tiny = {"float16": 6e-8, "float32": 1e-45, "float64": 5e-324}[dtype]
    v = [1.0, -3.5, 0.0, -0.0, 0.1, tiny, -tiny * 3, float("inf"), float("nan")]
    tx, jx = torch.tensor(v, dtype=getattr(torch, dtype), requires_grad=True), tj.tensor(v, dtype=getattr(tj, dtype),
                                                                                       requires_grad=True)
    (tm, te), (jm, je) = torch.frexp(tx), tj.frexp(jx)
    np.testing.assert_array_equal(jm.detach().numpy(), tm.detach().numpy())
    np.testing.assert_array_equal(np.signbit(jm.detach().numpy()), np.signbit(tm.detach().numpy()))
    np.testing.assert_array_equal(je.numpy(), te.numpy())
    tm[:5].sum().backward()
    jm[:5].sum().backward()
    np.testing.assert_array_equal(jx.grad.numpy()[:5], tx.grad.numpy()[:5])   # (PyTorch: 0 / 2**e, nan where 2**e underflows)


def test_frexp_refuses_integers():
    with pytest.raises(TypeError, match="frexp.*int64"):
        tj.frexp(tj.tensor([1, 2]))


def test_ldexp_is_exact_for_integer_exponents():
    x = tj.tensor([1.0, -3.0, 0.75], dtype=tj.float64)
    out = tj.ldexp(x, tj.tensor([2, -1, 10]))
    assert out.dtype == tj.float64
    assert out.tolist() == [4.0, -1.5, 768.0]
    assert x.ldexp(tj.tensor([1])).tolist() == [2.0, -6.0, 1.5]


@pytest.mark.parametrize("n", [-1, 1.5, True])
def test_polygamma_names_a_bad_order(n):
    with pytest.raises(ValueError, match="polygamma: n must be a non-negative int"):
        tj.polygamma(n, tj.tensor([1.0]))


def test_polygamma_orders_and_method():
    x = tj.tensor([1.0, 2.0], dtype=tj.float64)
    # psi(1) = -gamma, psi'(1) = pi^2/6, psi''(1) = -2 zeta(3)
    np.testing.assert_allclose(tj.polygamma(0, x).numpy()[0], -0.5772156649015329, rtol=1e-10)
    np.testing.assert_allclose(x.polygamma(1).numpy()[0], np.pi ** 2 / 6, rtol=1e-12)
    np.testing.assert_allclose(tj.special.polygamma(2, x).numpy()[0], -2 * 1.2020569031595942, rtol=1e-12)
    y = x.clone()
    y.polygamma_(1)
    np.testing.assert_allclose(y.numpy(), x.polygamma(1).numpy())


def test_bessel_values_at_zero_and_large_arguments():
    x = tj.tensor([0.0, 50.0, -50.0], dtype=tj.float64)
    assert tj.i0(x).numpy()[0] == 1.0 and tj.special.i1(x).numpy()[0] == 0.0
    np.testing.assert_allclose(tj.special.i0e(x).numpy()[1:], 0.056561626647454, rtol=1e-12)
    np.testing.assert_allclose(tj.special.i1e(x).numpy()[1:], [0.055993123892895, -0.055993123892895], rtol=1e-12)
    np.testing.assert_allclose(tj.special.i0(x).numpy(), np.i0(x.numpy()), rtol=1e-12)


def test_i1_gradient_at_zero_is_one_half():
    x = tj.tensor([0.0], dtype=tj.float64, requires_grad=True)
    tj.special.i1(x).sum().backward()
    assert x.grad.tolist() == [0.5]


def test_lgamma_has_poles_at_non_positive_integers():
    x = tj.tensor([0.0, -1.0, -2.5, 1.0])
    out = tj.lgamma(x).numpy()
    assert np.isinf(out[0]) and np.isinf(out[1]) and out[3] == 0.0
    np.testing.assert_allclose(out[2], -0.05624371649767405, rtol=1e-6)


@pytest.mark.parametrize("da, db", [("int16", "float64"), ("float32", "float64"), ("float64", "int64"),
                                    ("int64", "int64"), ("float32", "int32"), ("float64", "float32")])
def test_ldexp_promotes_both_operands_as_pytorch(da, db):
    torch = pytest.importorskip("torch")
    a, b = np.array([1, -3, 5]).astype(da), np.array([2, 0, -1]).astype(db)
    for a in (a, a[1]):   # (a 0-d input yields to a dim exponent of its category)
        want = torch.ldexp(torch.tensor(a), torch.tensor(b))
        got = tj.ldexp(tj.tensor(a), tj.tensor(b))
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())
