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


def test_variable_is_a_new_leaf_sharing_its_datas_storage():
    x = tj.ones(2, requires_grad=True)
    y = x * 2
    v = tj.autograd.Variable(y, requires_grad=True)
    assert v is not y and v.is_leaf and v.grad_fn is None and v.requires_grad
    v.data[0] = 5.0                      # the storage is y's
    assert y.tolist() == [5.0, 2.0]
    (v * 3).sum().backward()             # and no gradient reaches x
    assert v.grad.tolist() == [3.0, 3.0] and x.grad is None
    z = tj.zeros(2)
    assert tj.autograd.Variable(z, requires_grad=True).requires_grad and not z.requires_grad
    with pytest.raises(TypeError, match="has to be a tensor"):
        tj.autograd.Variable([1.0])
