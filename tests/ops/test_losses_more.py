"""multilabel_margin_loss's label rows (ops/losses_more.py): labels end at a row's first
-1, repeated labels count once as targets, and values and gradients equal PyTorch's."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

TARGETS = [[[3, 0, -1, 1, 2], [1, 1, 4, -1, -1], [-1, 2, 3, 0, 1], [0, 1, 2, 3, 4]],   # (N, C)
           [[4, 2, -1, 0, 0]],
           [2, -1, 0, 1, 3]]                                                            # unbatched


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_matches_pytorch(target, reduction):
    t = np.array(target)
    x = np.random.default_rng(t.size).standard_normal(t.shape).astype(np.float32)
    got = []
    for lib in (torch, tj):
        xt = lib.tensor(x, requires_grad=True)
        loss = lib.nn.functional.multilabel_margin_loss(xt, lib.tensor(t), reduction=reduction)
        (loss * lib.tensor(np.linspace(1.0, 2.0, loss.numel()).reshape(tuple(loss.shape)).astype(np.float32))).sum().backward()
        got.append((loss.detach().numpy(), xt.grad.numpy()))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-6, atol=1e-6)


def test_multilabel_margin_of_many_rows_matches_pytorch():
    rng = np.random.default_rng(3)
    t = rng.integers(0, 32, (64, 32))
    t[rng.random(64) < 0.5, rng.integers(0, 32)] = -1
    x = rng.standard_normal((64, 32)).astype(np.float32)
    got = []
    for lib in (torch, tj):
        xt = lib.tensor(x, requires_grad=True)
        loss = lib.nn.functional.multilabel_margin_loss(xt, lib.tensor(t))
        loss.backward()
        got.append((loss.item(), xt.grad.numpy()))
    assert got[1][0] == pytest.approx(got[0][0], rel=1e-6)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-6, atol=1e-7)
