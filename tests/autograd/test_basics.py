"""The classic autograd examples, leaf/non-leaf state, accumulation and the engine."""
from __future__ import annotations


import numpy as np
import pytest

import tracejit as tj


def test_y_equals_x_plus_w_times_w_plus_1():
    # y = (x + w) * (w + 1) at x = 2, w = 1: dy/dw = (w + 1) + (x + w) = 5, dy/dx = w + 1 = 2
    x = tj.tensor(2.0, requires_grad=True)
    w = tj.tensor(1.0, requires_grad=True)
    a = x + w
    b = w + 1
    a.retain_grad()
    y = a * b
    y.backward()
    assert w.grad.item() == 5.0
    assert x.grad.item() == 2.0
    assert x.is_leaf and w.is_leaf
    assert not a.is_leaf and not b.is_leaf and not y.is_leaf
    assert a.grad.item() == 2.0  # retained: dy/da = b
    with pytest.warns(UserWarning, match="not a leaf Tensor"):   # as PyTorch warns
        assert b.grad is None  # not retained: non-leaf grads are not kept
    assert a.retains_grad and not b.retains_grad
    assert y.grad_fn.name() == "MulBackward0"
    assert a.grad_fn.name() == "AddBackward0"


def test_z_equals_x_plus_y_times_y_minus_2():
    x = tj.tensor(2.0, requires_grad=True)
    y = tj.tensor(3.0, requires_grad=True)
    z = (x + y) * (y - 2)
    z.backward()
    assert x.grad.item() == 1.0  # y - 2
    assert y.grad.item() == 6.0  # (y - 2) + (x + y)


def test_leaf_requires_grad_flags():
    a = tj.ones(3)
    assert a.is_leaf and not a.requires_grad and a.grad_fn is None
    b = a * 2
    assert b.is_leaf and not b.requires_grad  # no input requires grad: no graph
    c = tj.ones(3, requires_grad=True)
    d = c.detach()
    assert d.is_leaf and not d.requires_grad
    d2 = (c * 2).detach()
    assert d2.grad_fn is None
    e = c.requires_grad_(False)
    assert e is c and not c.requires_grad
    with pytest.raises(RuntimeError, match="leaf"):
        (tj.ones(2, requires_grad=True) * 2).requires_grad = False


def test_retain_grad_on_intermediates_and_leaves():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    h.retain_grad()
    x.retain_grad()  # no-op on a leaf
    (h * 3).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tj.ones(2).retain_grad()


def test_accumulation_across_backward_calls_and_zero_():
    x = tj.tensor([1.0, -2.0], requires_grad=True)
    for _ in range(3):
        (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, -12.0])
    x.grad.zero_()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0])
    (x * 5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_grad_does_not_alias_graph_memory():
    # The first gradient stored in .grad must not share memory with arrays the graph or
    # the user still holds (accumulation writes into .grad in place).
    x = tj.ones(3, requires_grad=True)
    g = tj.ones(3)
    x.backward(g)
    x.backward(g)
    np.testing.assert_allclose(g.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_backward_with_explicit_gradient():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(tj.tensor([1.0, 0.5, 0.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 0.0])


def test_shared_subexpression_and_diamond():
    x = tj.tensor(3.0, requires_grad=True)
    a = x * 2
    b = a + a * a  # a used twice
    c = b * a
    c.backward()
    # c = (2x + 4x^2) * 2x = 4x^2 + 8x^3 -> dc/dx = 8x + 24x^2 = 24 + 216
    assert x.grad.item() == pytest.approx(240.0)


def test_broadcast_gradients_are_summed_back():
    x = tj.ones(3, 1, requires_grad=True)
    b = tj.ones(4, requires_grad=True)
    (x * b).sum().backward()
    assert x.grad.shape == (3, 1) and b.grad.shape == (4,)
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 1), 4.0))
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, 3.0))


def test_mixed_precision_gradient_dtypes():
    a = tj.ones(2, dtype=tj.float32, requires_grad=True)
    b = tj.ones(2, dtype=tj.float64, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype is tj.float32 and b.grad.dtype is tj.float64


def test_int_inputs_do_not_get_gradients():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    i = tj.tensor([1, 2])
    (x * i).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])
    assert i.grad is None and not i.requires_grad


def test_next_functions_and_names():
    x = tj.tensor(1.0, requires_grad=True)
    c = tj.tensor(2.0)
    y = (x * c).exp()
    assert y.grad_fn.name() == "ExpBackward0"
    (mul, _), = y.grad_fn.next_functions
    assert mul.name() == "MulBackward0"
    (acc, nr), (none, _) = mul.next_functions
    assert acc.name() == "AccumulateGrad" and nr == 0
    assert none is None  # c does not require grad
    assert acc.variable() is x
    assert "ExpBackward0" in repr(y.grad_fn)


def test_inplace_ops_keep_graph_correct():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y.mul_(3)
    y.add_(x)
    assert y._version == 2
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0])


def test_inplace_mul_by_tensor_that_requires_grad():
    # a.mul_(b) needs the old a for b's gradient although a's memory is overwritten.
    a = tj.tensor([1.0, 2.0], requires_grad=True).clone()
    b = tj.tensor([3.0, 4.0], requires_grad=True)
    a.mul_(b)
    a.sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0])


def test_setitem_is_differentiable():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = tj.tensor(10.0, requires_grad=True)
    y = x * 1.0
    y[1] = v * 2
    (y * tj.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 3.0])
    assert v.grad.item() == 4.0


def test_copy_and_fill_cut_the_old_graph():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.fill_(5.0)
    (y * x).sum().backward()  # y no longer depends on x
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])
    x.grad = None
    s = tj.tensor([7.0, 8.0], requires_grad=True)
    z = x * 3
    z.copy_(s)
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0])  # as in PyTorch: a zero gradient
    np.testing.assert_allclose(s.grad.numpy(), [1.0, 1.0])


def test_long_chain_backprops_without_recursion_limit():
    x = tj.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.backward()
    assert x.grad.item() == 1.0
    del y  # freeing a 100k-deep graph must not hit the recursion limit either


def test_deep_graph_grad_with_create_graph():
    x = tj.tensor(0.5, dtype=tj.float64, requires_grad=True)
    y = x
    for _ in range(2000):
        y = y * 1.0001
    y = y * x
    (g,) = tj.autograd.grad(y, x, create_graph=True)
    assert g.requires_grad  # d/dx (c x^2) = 2 c x depends on x
    c = 1.0001 ** 2000
    assert g.item() == pytest.approx(2 * c * 0.5)
    (gg,) = tj.autograd.grad(g, x)
    assert gg.item() == pytest.approx(2 * c)


def test_detach_shares_memory_and_version():
    x = tj.ones(3, requires_grad=True)
    d = x.detach()
    with tj.no_grad():
        x.add_(1)
    assert d._version == x._version == 1
    np.testing.assert_allclose(d.numpy(), [2.0, 2.0, 2.0])


def test_grad_of_views():
    x = tj.arange(6.0).reshape(2, 3).requires_grad_()
    y = x.t()[1:, :] * tj.tensor([[1.0, 2.0]])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 1, 1], [0, 2, 2]])


@pytest.mark.parametrize("a_shape", [(5, 3), (7, 5, 3)])
def test_matmul_backward_computes_only_the_gradients_needed(a_shape, monkeypatch):
    """A weight's gradient from an input that needs none: one GEMM, not also g @ w.T
    (the input reaches the VJP as a shape-only stand-in) -- and both when both need it."""
    from tracejit.ops import linalg
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal(a_shape).astype(np.float32)
    w_np = rng.standard_normal((3, 4)).astype(np.float32)
    calls = []
    for prim in linalg.PRODUCTS:   # matmul and the transposed-operand records of its backward
        monkeypatch.setattr(prim, "run", lambda xp, x, y, _orig=prim.run, _name=prim.name:
                            calls.append((_name, x.shape, y.shape)) or _orig(xp, x, y))
    a, w = tj.tensor(a_np), tj.tensor(w_np, requires_grad=True)
    (a @ w).sum().backward()
    assert len(calls) == 2, calls  # forward, and the weight's gradient
    np.testing.assert_allclose(w.grad.numpy(), a_np.reshape(-1, 3).sum(0)[:, None] * np.ones((1, 4)),
                               rtol=1e-5, atol=1e-5)
    calls.clear()
    a = tj.tensor(a_np, requires_grad=True)
    w = tj.tensor(w_np, requires_grad=True)
    (a @ w).sum().backward()
    assert len(calls) == 3, calls
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(w_np.sum(1), a_shape), rtol=1e-5, atol=1e-5)
