"""take_along_dim (ops/gather_prim.py) broadcasts its input and indices over the other dims,
as PyTorch's, with PyTorch's gradient, eagerly and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("index_shape, dim", [((1, 1, 2), 2), ((1, 3, 1), 2), ((2, 1, 4), 1), ((2, 1, 1), 0),
                                              ((1, 3, 2), -1)])
def test_take_along_dim_broadcasts_as_pytorch(index_shape, dim):
    x = np.arange(24.0).reshape(2, 3, 4)
    idx = np.random.default_rng(0).integers(0, x.shape[dim], index_shape)
    got = []
    for m, f in ((torch, torch.take_along_dim), (tj, tj.take_along_dim),
                 (tj, tj.compile(lambda a, i, d=dim: tj.take_along_dim(a, i, d)))):
        a = m.tensor(x, requires_grad=True)
        y = f(a, m.tensor(idx), dim) if m is torch or f is tj.take_along_dim else f(a, m.tensor(idx))
        (y * m.arange(float(y.numel())).reshape(y.shape)).sum().backward()
        got.append((y.detach().numpy(), a.grad.numpy()))
    for g in got[1:]:
        for u, w in zip(g, got[0]):
            np.testing.assert_array_equal(u, w)
