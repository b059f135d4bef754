"""affine_grid and grid_sample against PyTorch: every mode, padding mode and
align_corners, values and the gradients with respect to the input and the grid."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch", reason="compares with PyTorch")


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_matches_torch(mode, padding_mode, align_corners):
    r = np.random.default_rng(3)
    x = r.standard_normal((2, 3, 5, 6))
    g = r.uniform(-1.4, 1.4, (2, 4, 7, 2))   # points outside the image too
    outs = []
    for lib, f in ((tj, F), (torch, torch.nn.functional)):
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)
        y = f.grid_sample(xt, gt, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) % 5)).sum().backward()
        gg = gt.grad.numpy() if gt.grad is not None else np.zeros_like(g)
        outs.append((y.detach().numpy(), xt.grad.numpy(), gg))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 2, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch(size, align_corners):
    r = np.random.default_rng(4)
    theta = r.standard_normal((size[0], len(size) - 2, len(size) - 1))
    ours = tj.tensor(theta, requires_grad=True)
    theirs = torch.tensor(theta, requires_grad=True)
    a = F.affine_grid(ours, size, align_corners=align_corners)
    b = torch.nn.functional.affine_grid(theirs, size, align_corners=align_corners)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    a.pow(2).sum().backward()
    b.pow(2).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10)


def test_bad_arguments_name_the_culprit():
    x, g = tj.randn(1, 1, 3, 3), tj.randn(1, 2, 2, 2)
    with pytest.raises(ValueError, match="mode"):
        F.grid_sample(x, g, mode="area")
    with pytest.raises(ValueError, match="padding_mode"):
        F.grid_sample(x, g, padding_mode="wrap")
    with pytest.raises(Exception, match="grid"):
        F.grid_sample(x, tj.randn(2, 2, 2, 2))
    with pytest.raises(Exception, match="theta"):
        F.affine_grid(tj.randn(2, 2, 2), (2, 1, 3, 3))
