"""In-place writes through views of a permuted or strided base that is part of an autograd
graph (autograd/views.py): gradients as PyTorch's. The positions inside a base that is not
row-major come from its strides (they raised "not supported")."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _permuted(lib, leaf):
    return (leaf.permute(2, 0, 1) * 1.0).permute(1, 2, 0)    # a non-leaf, not row-major


def _strided(lib, leaf):
    return (leaf * 1.0)[..., ::2]


@pytest.mark.parametrize("make", [_permuted, _strided])
def test_writes_through_views_of_a_non_row_major_base_as_torch(make):
    data = np.random.default_rng(0).standard_normal((2, 3, 6)).astype(np.float32)
    grads = []
    for lib in (torch, tj):
        leaf = lib.tensor(data, requires_grad=True)
        x = make(lib, leaf)
        v = x[..., :2][::2]
        before = x[1]               # taken before the writes: its history is rebuilt
        v.mul_(3.0)
        x.transpose(0, 2)[1].add_(1.0)
        w = lib.arange(float(x.numel())).reshape(tuple(x.shape))
        ((x * w).sum() + (before * before).sum()).backward()
        grads.append((leaf.grad.numpy(), x.detach().numpy()))
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-6)
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-6)
