"""Gradients of ops/linalg_dense.py's decompositions against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (2, 3, 4)])
def test_pinv_gradient_matches_pytorch(shape):
    """pinv's VJP (PyTorch's pinv_backward) on wide, tall, square and batched matrices, as
    Lagrangian networks take it of a Hessian."""
    a = np.random.default_rng(0).standard_normal(shape)
    w = np.random.default_rng(1).standard_normal(shape[:-2] + (shape[-1], shape[-2]))
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        (m.linalg.pinv(x) * m.tensor(w)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-10, atol=1e-12)
