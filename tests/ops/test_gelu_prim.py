"""GELU as a primitive (tracejit/ops/gelu_prim.py): forward, first and second derivatives
against PyTorch, special values, and the composite formula it replaces."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tracejit as tj
from tracejit.nn import functional as F
from tracejit.ops.gelu_prim import gelu_backward

torch = pytest.importorskip("torch")

APPROX = ["none", "tanh"]


def _x(dtype=np.float64, n=41):
    return np.linspace(-6.0, 6.0, n).astype(dtype)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_and_gradient_match_torch(approximate, dtype):
    xa = _x(dtype)
    x = tj.tensor(xa, requires_grad=True)
    y = F.gelu(x, approximate=approximate)
    assert y.grad_fn.name() == "GeluBackward0"
    (y * tj.tensor(np.cos(xa))).sum().backward()
    tx = torch.tensor(xa, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    (ty * torch.tensor(np.cos(xa))).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), **tol)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **tol)


@pytest.mark.parametrize("approximate", APPROX)
def test_second_derivative_matches_torch(approximate):
    xa = _x()
    x = tj.tensor(xa, requires_grad=True)
    (g,) = tj.autograd.grad(F.gelu(x, approximate=approximate).sum(), [x], create_graph=True)
    (g * g).sum().backward()
    tx = torch.tensor(xa, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.nn.functional.gelu(tx, approximate=approximate).sum(), [tx],
                                create_graph=True)
    (tg * tg).sum().backward()
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_backward_gradient_in_g_and_x_by_finite_differences(approximate):
    r = np.random.default_rng(0)
    xa, ga, wa = (r.standard_normal(7) for _ in range(3))

    def f(g, x):
        return float(np.sum(gelu_backward(tj.tensor(g), tj.tensor(x), approximate).numpy() * wa))
    g = tj.tensor(ga, requires_grad=True)
    x = tj.tensor(xa, requires_grad=True)
    (gelu_backward(g, x, approximate) * tj.tensor(wa)).sum().backward()
    h = 1e-6
    for i in range(7):
        e = np.zeros(7)
        e[i] = h
        np.testing.assert_allclose(g.grad.numpy()[i], (f(ga + e, xa) - f(ga - e, xa)) / (2 * h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(x.grad.numpy()[i], (f(ga, xa + e) - f(ga, xa - e)) / (2 * h), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("approximate", APPROX)
def test_special_values_as_torch(approximate):
    xa = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 30.0, -30.0], np.float32)
    x = tj.tensor(xa, requires_grad=True)
    y = F.gelu(x, approximate=approximate)
    y.sum().backward()
    tx = torch.tensor(xa, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    ty.sum().backward()
    # +-inf: what the formula gives (as the composite did; PyTorch's kernels differ among
    # themselves there); everything else as PyTorch, nan included. Signed zeros (-0.0 and
    # -30.0 give -0.0) are the formula's: PyTorch's AVX-512 kernels give them too, its AVX2
    # kernels (ATEN_CPU_CAPABILITY=avx2) give +0.0, so the sign is checked against the
    # formula in float64, not against whichever kernel this machine's PyTorch runs.
    fin = np.isfinite(xa)
    np.testing.assert_allclose(y.detach().numpy()[fin], ty.detach().numpy()[fin], rtol=1e-6, equal_nan=True)
    if approximate == "tanh":
        formula = [0.5 * v * (1.0 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
                   for v in xa[fin].astype(float)]
    else:
        formula = [0.5 * v * (1.0 + math.erf(v / math.sqrt(2))) for v in xa[fin].astype(float)]
    assert np.signbit(y.detach().numpy()[fin]).tolist() == np.signbit(formula).tolist() \
        == [False, True, False, True]
    np.testing.assert_allclose(x.grad.numpy()[fin], tx.grad.numpy()[fin], rtol=1e-6, equal_nan=True)
    # the formula at +-inf: 0.5 * inf * 2 = inf; 0.5 * -inf * 0 = nan
    np.testing.assert_array_equal(y.detach().numpy()[:2], [np.inf, np.nan])


def test_forward_is_the_composite_formula_bitwise():
    xa = _x(np.float32, 1001)
    x = tj.tensor(xa)
    want = 0.5 * x * (1.0 + tj.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    np.testing.assert_array_equal(F.gelu(x, approximate="tanh").numpy(), want.numpy())


def test_bad_approximate_names_the_argument():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(tj.ones(3), approximate="fast")


def test_integer_input_raises_as_in_pytorch():
    # PyTorch has no integer GELU kernel ("not implemented for 'Long'")
    with pytest.raises(NotImplementedError, match="gelu: expected input .* got int64"):
        F.gelu(tj.tensor([1, -2, 3]), approximate="tanh")
