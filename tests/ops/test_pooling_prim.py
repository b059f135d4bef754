"""max_pool2d / avg_pool2d primitives (tracejit/ops/pooling_prim.py) inside a small CNN:
eager vs `tracejit.script` (the primitives run through their eager impl in the compiled
plan, backward included), PyTorch's first-maximum gradient at ties through ReLU zeros, and
the user-facing errors of the shape rule."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError
from tracejit.ops import pooling_prim as P


class _Net(tj.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.conv = tj.nn.Conv2d(2, 4, 3)
        self.fc = tj.nn.Linear(4 * 4 * 4, 3)
        self.pool = pool

    def forward(self, x):
        x = self.pool(tj.relu(self.conv(x)))  # ReLU zeros: many tied maxima
        return self.fc(x.reshape(x.shape[0], -1))


_POOLS = {
    "max_overlap_pad": lambda x: tj.nn.functional.max_pool2d(x, 3, 2, 1),
    "max_tiles": lambda x: tj.nn.functional.max_pool2d(x, 2),
    "avg_overlap_pad": lambda x: tj.nn.functional.avg_pool2d(x, 3, 2, 1),
}


@pytest.mark.parametrize("pool", sorted(_POOLS))
def test_scripted_cnn_matches_eager(pool):
    tj.manual_seed(0)
    net = _Net(_POOLS[pool])
    x = tj.tensor(np.random.default_rng(1).standard_normal((5, 2, 10, 10)).astype(np.float32))
    y = tj.tensor(np.array([0, 1, 2, 1, 0]))

    def grads(fwd):
        net.zero_grad()
        loss = tj.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        return float(loss.item()), [p.grad.numpy().copy() for p in net.parameters()]

    le, ge = grads(net)
    lc, gc = grads(tj.script(net))
    assert abs(le - lc) < 1e-5
    for a, b in zip(ge, gc):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    assert any(np.abs(g).sum() > 0 for g in ge)


def test_tied_windows_give_the_first_maximum_everything():
    # one 2x2 window of equal values: PyTorch's gradient is all at the first (row-major)
    x = tj.tensor(np.ones((1, 1, 2, 2)), requires_grad=True)
    tj.nn.functional.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[1.0, 0.0], [0.0, 0.0]])
    out, idx = tj.nn.functional.max_pool2d(tj.tensor(np.ones((1, 1, 2, 2))), 2, return_indices=True)
    assert idx.dtype is tj.int64 and idx.numpy().tolist() == [[[[0]]]]


def test_nan_window_propagates():
    x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    x[0, 0, 1, 1] = np.nan
    out = tj.nn.functional.max_pool2d(tj.tensor(x), 2).numpy()
    assert np.isnan(out[0, 0, 0, 0]) and out[0, 0, 1, 1] == 15.0


def test_rule_errors_name_the_problem():
    with pytest.raises(ShapeError, match="4-D"):
        P.max_pool2d(tj.zeros(3, 4), (2, 2), (2, 2))
    with pytest.raises(ValueError, match="at most half"):
        P.max_pool2d(tj.zeros(1, 1, 4, 4), (2, 2), (2, 2), (2, 2))
    with pytest.raises(ShapeError, match="larger than the input"):
        P.avg_pool2d(tj.zeros(1, 1, 2, 2), (3, 3), (1, 1))
