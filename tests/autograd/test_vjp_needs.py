"""VJPs that take ``needs=`` (registry.py ``extra["needs"]``) compute no gradient for an
input that gets none, and still give the right values for those that do."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import elementwise


def _count_neg(monkeypatch):
    calls = []
    impl = elementwise.NEG.impl
    monkeypatch.setattr(elementwise.NEG, "impl", lambda xp, a: calls.append(a.shape) or impl(xp, a))
    monkeypatch.setattr(elementwise.NEG, "ufunc", None)  # (so the fast path calls impl)
    return calls


@pytest.mark.parametrize("y_grad", [False, True])
def test_sub_negates_only_for_an_input_that_needs_it(monkeypatch, y_grad):
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = tj.tensor([0.5, 0.25, 4.0], requires_grad=y_grad)
    calls = _count_neg(monkeypatch)
    (x - y).sum().backward()
    assert len(calls) == (1 if y_grad else 0)
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])
    if y_grad:
        np.testing.assert_array_equal(y.grad.numpy(), [-1.0, -1.0, -1.0])


@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_div_gradients_for_each_pattern(monkeypatch, which):
    a = tj.tensor([1.0, 2.0, 6.0], requires_grad=which in ("a", "both"))
    b = tj.tensor([2.0, 4.0, 3.0], requires_grad=which in ("b", "both"))
    calls = _count_neg(monkeypatch)
    (a / b).sum().backward()
    assert len(calls) == (0 if which == "a" else 1)  # -g * out / b only for b
    if a.requires_grad:
        np.testing.assert_allclose(a.grad.numpy(), [0.5, 0.25, 1 / 3], rtol=1e-6)
    if b.requires_grad:
        np.testing.assert_allclose(b.grad.numpy(), [-0.25, -0.125, -6 / 9], rtol=1e-6)


def test_needs_defaults_to_all_inputs_for_second_derivatives():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = tj.tensor([4.0, 8.0])
    g, = tj.autograd.grad((x * x / y).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [0.5, 0.5], rtol=1e-6)
    gg, = tj.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), [0.5, 0.25], rtol=1e-6)
