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
