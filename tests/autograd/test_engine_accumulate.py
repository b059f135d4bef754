"""Gradient accumulation in the backward engine: in place when the engine owns the buffer,
never into a tensor anyone else can see."""
from __future__ import annotations

import numpy as np

import tracejit as tj
from tracejit.autograd import engine


def test_slices_of_one_tensor_accumulate_in_place(monkeypatch):
    taken = []
    real = engine._owned_by_engine
    monkeypatch.setattr(engine, "_owned_by_engine", lambda old, g: taken.append(1) or real(old, g))
    xa = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = tj.tensor(xa, requires_grad=True)
    y = x * 2.0
    (y[0] * 1.0 + y[1] * 3.0 + y[0] * 5.0 + y[3] * 7.0).sum().backward()
    want = np.zeros_like(xa)
    want[0], want[1], want[3] = 12.0, 6.0, 14.0
    np.testing.assert_array_equal(x.grad.numpy(), want)
    assert taken  # the engine met accumulations


def test_a_gradient_handed_to_two_inputs_is_not_modified():
    # add's VJP returns the same tensor for both inputs; an in-place accumulation into it
    # would change the other input's gradient too.
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    w = tj.tensor([3.0, 4.0], requires_grad=True)
    y = x * w
    z = y + y                    # dz/dy = 2, via two edges carrying one tensor
    (z * z).sum().backward()     # d/dy (2y)^2 = 8y
    np.testing.assert_allclose(x.grad.numpy(), 8 * (x * w).detach().numpy() * w.detach().numpy())
    np.testing.assert_allclose(w.grad.numpy(), 8 * (x * w).detach().numpy() * x.detach().numpy())


def test_retained_gradient_is_the_total_and_stays_put():
    x = tj.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = x * 1.0
    h.retain_grad()
    (h * 2.0 + h * 3.0 + h[0]).sum().backward()  # h[0] is broadcast over 3 elements
    np.testing.assert_array_equal(h.grad.numpy(), [8.0, 5.0, 5.0])
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 5.0, 5.0])


def test_create_graph_keeps_accumulations_differentiable():
    x = tj.tensor([0.5, 1.5], requires_grad=True)
    y = x * x
    # y[0] + y[1] is broadcast over the 2 elements of y * 2: d/dy_i = 2 + 2 = 4
    (g,) = tj.autograd.grad((y[0] + y[1] + y * 2.0).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 8 * x.detach().numpy())
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 8.0])


def test_a_root_over_leaves_takes_the_short_path_with_the_same_results(monkeypatch):
    short = []
    real = engine._backward_to_leaves
    monkeypatch.setattr(engine, "_backward_to_leaves", lambda *a: short.append(1) or real(*a))
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    w = tj.tensor([3.0, 5.0], requires_grad=True)
    (x * w).backward(tj.tensor([1.0, 10.0]))          # mul's node, then two leaves
    assert short == [1]
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 50.0])
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 20.0])
    (x * w).backward(tj.tensor([1.0, 1.0]))           # accumulates into .grad
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 55.0])
    # the same leaf twice (x * x), a hook on a leaf, a broadcast input: the general walk
    y = tj.tensor([1.0, 2.0], requires_grad=True)
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 4.0])
    seen = []
    b = tj.tensor([4.0], requires_grad=True)
    b.register_hook(lambda g: seen.append(g.numpy().copy()))
    (x * b).sum().backward()
    np.testing.assert_array_equal(b.grad.numpy(), [3.0])
    assert len(seen) == 1 and seen[0].tolist() == [3.0]
    assert len(short) == 2     # (y * y).sum() reaches mul's node first: not a root over leaves


def test_the_short_path_sums_a_broadcast_input_and_lets_the_leaf_take_its_gradient():
    x = tj.tensor(np.ones((3, 2), np.float32), requires_grad=True)
    b = tj.tensor(np.ones(2, np.float32), requires_grad=True)
    (x + b).backward(tj.tensor(np.arange(6, dtype=np.float32).reshape(3, 2)))
    np.testing.assert_array_equal(b.grad.numpy(), [6.0, 9.0])      # summed to b's shape
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(6).reshape(3, 2))
