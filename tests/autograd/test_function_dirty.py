"""autograd.Function's ``ctx.mark_dirty``: an input modified in place by forward and returned
takes the Function's node as its history (through its base for a view), eagerly and in a
compiled function, against PyTorch's gradients."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _functions(m):
    class Double(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            ctx.save_for_backward(x)
            return x

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * 2 + 0 * y

    class AddInto(m.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            x.add_(w)
            ctx.mark_dirty(x)
            return x, w * 2

        @staticmethod
        def backward(ctx, g, h):
            return g, g + 2 * h
    return Double, AddInto


def _program(m, case):
    double, add_into = _functions(m)
    a = m.tensor([[1.0, 2.0], [3.0, -1.0]], requires_grad=True)
    w = m.tensor([0.5, 4.0], requires_grad=True)
    k = m.tensor([[1.0, 2.0], [3.0, 4.0]])

    def f(a, w):
        x = a * 1
        if case == "whole":
            y = double.apply(x)
            return (y * y * k).sum(), y is x
        if case == "view":
            y = double.apply(x[0])
            return (x * k).sum() + (y * y).sum(), False
        y, z = add_into.apply(x[1].clone(), w)
        return (y * 3 + z * z).sum(), False
    return f, a, w


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", ["whole", "view", "two_outputs"])
def test_mark_dirty_gradients_match_torch(case, compiled):
    got = []
    for m in (torch, tj):
        f, a, w = _program(m, case)
        if compiled and m is tj:
            f = tj.compile(f)
        loss, same = f(a, w)
        loss.backward()
        got.append((loss.item(), a.grad.numpy(), None if w.grad is None else w.grad.numpy(), same))
    want, have = got
    np.testing.assert_allclose(have[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(have[1], want[1], rtol=1e-6)
    assert (have[2] is None) == (want[2] is None)
    if want[2] is not None:
        np.testing.assert_allclose(have[2], want[2], rtol=1e-6)
    assert have[3] == want[3]


def test_mark_dirty_of_a_leaf_that_requires_grad_raises():
    double, _ = _functions(tj)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        double.apply(tj.tensor([1.0], requires_grad=True))


def test_mark_dirty_of_a_tensor_forward_does_not_return_raises():
    class Bad(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.raises(RuntimeError, match="Bad: a tensor passed to ctx.mark_dirty"):
        Bad.apply(tj.tensor([1.0], requires_grad=True) * 1)
