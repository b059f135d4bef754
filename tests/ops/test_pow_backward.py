"""pow's gradient for a constant exponent is one op, pow_backward (ops/elementwise.py):
bitwise the three-op composite it replaces (``g * b * a ** (b - 1)``; ``g * 2.0 * a`` for
b = 2), special values included, and one node's worth of work in the backward."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.elementwise import pow_backward


def _special(dtype):
    v = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, 1e-30, -1e30],
                 dtype)
    return np.concatenate([v, np.random.default_rng(0).standard_normal(20).astype(dtype)])


def _composite(g, a, b):
    return g * 2.0 * a if b == 2 else g * b * tj.pow(a, b - 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("b", [3, 2, 2.0, 4, -1, 0.5, 1.7, 1])
def test_gradient_of_pow_is_bitwise_the_composite(dtype, b):
    a = _special(dtype)
    g = np.random.default_rng(1).standard_normal(a.shape).astype(dtype)
    x = tj.tensor(a, requires_grad=True)
    with np.errstate(all="ignore"):
        (x ** b).backward(tj.tensor(g))
        want = _composite(tj.tensor(g), tj.tensor(a), b).numpy()
        direct = pow_backward(tj.tensor(g), tj.tensor(a), b).numpy()
    got = x.grad.numpy()
    assert got.dtype == want.dtype == direct.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(direct, want)
    assert np.signbit(got).tolist() == np.signbit(want).tolist()


def test_pow_backward_is_one_node_in_the_graph():
    x = tj.tensor(np.arange(1.0, 5.0), requires_grad=True)
    g = tj.ones(4, dtype=tj.float64, requires_grad=True)
    (gx,) = tj.autograd.grad(x ** 3, x, g, create_graph=True)
    assert gx.grad_fn.name() == "PowBackwardBackward0"  # one node: pow_backward's
    np.testing.assert_array_equal(gx.detach().numpy(), 3 * np.arange(1.0, 5.0) ** 2)
    # second derivative through pow_backward's own VJP: d/dx 3 x^2 = 6 x
    (ggx,) = tj.autograd.grad(gx.sum(), x)
    np.testing.assert_array_equal(ggx.numpy(), 6 * np.arange(1.0, 5.0))


def test_pow_backward_promotes_and_rejects_integers():
    got = pow_backward(tj.ones(3, dtype=tj.float32), tj.full((3,), 2.0, dtype=tj.float64), 3)
    assert got.dtype is tj.float64  # promoted as any binary op
    np.testing.assert_array_equal(got.numpy(), [12.0, 12.0, 12.0])
    with pytest.raises(tj.errors.DTypeError, match="pow_backward"):
        pow_backward(tj.ones(3, dtype=tj.int64), tj.ones(3, dtype=tj.int64), 3)


def test_tensor_exponent_gradients_at_zero_as_torch():
    # d/da a**b is 0 where b == 0 (not 0 * a**-1, nan at a == 0); d/db is 0 at a == 0
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (torch, tj):
        a = lib.tensor([0.0, 2.0, 0.0, 3.0], requires_grad=True)
        b = lib.tensor([0.0, 0.0, 2.0, 1.5], requires_grad=True)
        (a ** b).sum().backward()
        grads.append((a.grad.numpy(), b.grad.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-6)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-6)
