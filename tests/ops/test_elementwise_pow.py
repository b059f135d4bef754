"""pow by a small integer exponent (multiplications, then a reciprocal for a negative one)
on every rank, 0-d included: values and gradients against numpy."""
import numpy as np
import pytest

import tracejit as tj


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("exponent", [-4, -3, -2, -2.0, -1, 2, 3])
@pytest.mark.parametrize("shape", [(), (1,), (2, 3)])
def test_integer_exponents_on_any_rank(shape, exponent, dtype):
    a = np.full(shape, 1.5, dtype) + np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    x = tj.tensor(a, requires_grad=True)
    y = x ** exponent
    y.sum().backward()
    assert y.dtype == x.dtype and tuple(y.shape) == shape
    np.testing.assert_allclose(y.detach().numpy(), a.astype(np.float64) ** exponent, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), exponent * a.astype(np.float64) ** (exponent - 1), rtol=1e-6)
    np.testing.assert_allclose(tj.compile(lambda t: t ** exponent)(tj.tensor(a)).numpy(), y.detach().numpy(),
                               rtol=1e-6)


def test_a_distributions_variance_of_a_python_number():
    assert float(tj.distributions.Exponential(2.0).variance) == 0.25


@pytest.mark.parametrize("base", [-3, -2.5, 0, 0.0, 2])
def test_exponent_gradient_of_a_number_base_matches_pytorch(base):
    """d/db base**b = base**b * log(base): nan for a negative base, and for base 0 -inf where
    b < 0 and 0 where b >= 0 (not 0 everywhere)."""
    torch = pytest.importorskip("torch")
    b = np.array([-np.inf, -0.5, 0.4, 2.0, 3.0, 0.0])
    got = []
    for lib in (torch, tj):
        x = lib.tensor(b, requires_grad=True)
        y = base ** x
        y.sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    for a, w in zip(got[1], got[0]):
        np.testing.assert_array_equal(a, w)


def test_exponent_gradient_at_a_zero_base_tensor_matches_pytorch():
    torch = pytest.importorskip("torch")
    got = []
    for lib in (torch, tj):
        a = lib.tensor(np.array([0.0, 0.0, -2.0, 2.0, 0.0]), requires_grad=True)
        b = lib.tensor(np.array([2.0, -1.0, 0.5, 3.0, 0.0]), requires_grad=True)
        (a ** b).sum().backward()
        got.append((a.grad.numpy(), b.grad.numpy()))
    for a, w in zip(got[1], got[0]):
        np.testing.assert_array_equal(a, w)


@pytest.mark.parametrize("base_dtype", ["int8", "int64", "bool"])
def test_integers_to_a_0d_negative_integer_tensor_match_pytorch(base_dtype):
    """1 / a**-b truncated (0, 1 for 1, +-1 for -1), as for a tensor of exponents; the
    0-d exponent tensor raised numpy's 'negative integer powers' error."""
    torch = pytest.importorskip("torch")
    a = np.array([2, 1, -1, 0, 3]).astype(base_dtype)
    for e in (-1, -2, -3):
        want = torch.tensor(a) ** torch.tensor(e)
        for f in (lambda x, y: x ** y, tj.trace(lambda x, y: x ** y, compiler="interpret")):
            got = f(tj.tensor(a), tj.tensor(e))
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("base", [2, -1, False, 1])
def test_python_int_to_negative_integer_tensor_powers_when_compiled(base):
    torch = pytest.importorskip("torch")
    e = [-1, 2, -2, 3]
    want = base ** torch.tensor(e, dtype=torch.int16)
    got = tj.trace(lambda t: base ** t, compile="sync")(tj.tensor(e, dtype=tj.int16))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dtype,exponent", [("uint8", 300), ("uint8", 70000), ("uint8", -1), ("int8", -1),
                                            ("int16", 70000), ("int32", 2 ** 40)])
def test_an_integer_exponent_beyond_the_dtype_raises_as_pytorch(dtype, exponent):
    """PyTorch converts a Python int exponent to the integer tensor's dtype, checked (other
    binary ops wrap it): uint8 ** 300 raises where it used to give 2 ** 44 wrapped."""
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.tensor([2, 3], dtype=getattr(torch, dtype)) ** exponent
    x = tj.tensor([2, 3], dtype=getattr(tj, dtype))
    for call in (lambda: x ** exponent, lambda: tj.pow(x, exponent), lambda: x.pow_(exponent),
                 lambda: tj.compile(lambda t: t ** exponent)(x)):
        with pytest.raises(RuntimeError, match="negative integer powers" if exponent < 0 else "without overflow"):
            call()
    assert x.tolist() == [2, 3]
    # (in range it is computed: 3 ** 5 wraps in int8, as PyTorch's)
    assert (tj.tensor([3], dtype=tj.int8) ** 5).tolist() == (torch.tensor([3], dtype=torch.int8) ** 5).tolist()
