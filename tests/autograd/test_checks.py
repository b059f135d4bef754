"""gradcheck / gradgradcheck catch wrong gradients and pass right ones; Variable and the
anomaly switches are accepted."""
import pytest

import tracejit as tj
from tracejit.autograd import Function


class WrongSquare(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x            # should be 2 * g * x


def test_gradcheck_passes_right_and_fails_wrong_gradients():
    x = tj.randn(3, 2, dtype=tj.float64, requires_grad=True)
    w = tj.randn(2, 2, dtype=tj.float64, requires_grad=True)
    assert tj.autograd.gradcheck(lambda a, b: (a @ b).tanh(), (x, w))
    assert tj.autograd.gradgradcheck(lambda a: (a * a).sin(), (x,))
    assert not tj.autograd.gradcheck(WrongSquare.apply, (x,), raise_exception=False)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        tj.autograd.gradcheck(WrongSquare.apply, (x,))


def test_variable_and_anomaly_switches():
    v = tj.autograd.Variable(tj.ones(2), requires_grad=True)
    assert v.requires_grad
    with tj.autograd.detect_anomaly():
        assert tj.autograd.is_anomaly_enabled()
        (v * 2).sum().backward()
    assert not tj.autograd.is_anomaly_enabled()
    assert v.grad.tolist() == [2.0, 2.0]
