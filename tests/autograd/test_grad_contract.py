"""A leaf's new `.grad` follows PyTorch's layout contract: the leaf's strides when the leaf is
dense in another order than row-major (transposed, channels_last), else row-major; an
accumulation into an existing `.grad` keeps that `.grad`'s layout."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj


def _leaves(lib):
    return {
        "transposed": lambda: lib.arange(6.0).reshape(3, 2).t(),
        "channels_last": lambda: lib.arange(120.0).reshape(2, 3, 4, 5).to(memory_format=lib.channels_last),
        "permuted": lambda: lib.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1),
        "sliced": lambda: lib.arange(12.0).reshape(4, 3)[:, ::2],
        "row_major": lambda: lib.arange(6.0).reshape(2, 3),
    }


@pytest.mark.parametrize("kind", list(_leaves(np)))
@pytest.mark.parametrize("create_graph", [False, True])
def test_new_grad_takes_the_contract_layout(kind, create_graph):
    got = []
    for lib in (torch, tj):
        y = _leaves(lib)[kind]().requires_grad_()
        (y.contiguous() ** 2).sum().backward(create_graph=create_graph)   # arrives row-major
        got.append((y.grad.stride(), y.grad.detach().numpy().copy()))
        if not create_graph:
            (y * 3).sum().backward()   # into the existing .grad: in place, its layout kept
            got.append((y.grad.stride(), y.grad.detach().numpy().copy()))
    half = len(got) // 2
    for (ts, tv), (js, jv) in zip(got[:half], got[half:]):
        assert js == ts
        np.testing.assert_allclose(jv, tv)


def test_gradient_of_another_layout_is_copied_row_major_for_a_row_major_leaf():
    strides = []
    for lib in (torch, tj):
        y = lib.arange(6.0).reshape(2, 3).t()
        w = lib.ones(3, 2).requires_grad_()
        (y * w).sum().backward()          # w's gradient arrives as y: transposed
        strides.append(w.grad.stride())
        np.testing.assert_allclose(w.grad.numpy(), np.arange(6.0).reshape(2, 3).T)
    assert strides[1] == strides[0] == (2, 1)


@pytest.mark.parametrize("create_graph", [False, True])
def test_backward_inputs_gives_a_leaf_the_contract_layout(create_graph):
    strides = []
    for lib in (torch, tj):
        y = lib.arange(6.0).reshape(3, 2).t().requires_grad_()
        (y.contiguous() ** 2).sum().backward(inputs=[y], create_graph=create_graph)
        strides.append(y.grad.stride())
        np.testing.assert_allclose(y.grad.detach().numpy(), 2 * np.arange(6.0).reshape(3, 2).T)
    assert strides[1] == strides[0] == (1, 2)


def test_create_graph_grad_in_the_leaf_layout_stays_differentiable():
    y = tj.arange(6.0).reshape(3, 2).t().requires_grad_()
    (y.contiguous() ** 3).sum().backward(create_graph=True)
    assert y.grad.stride() == (1, 2) and y.grad.requires_grad
    (gg,) = tj.autograd.grad(y.grad.sum(), y)
    np.testing.assert_allclose(gg.numpy(), 6 * np.arange(6.0).reshape(3, 2).T)
