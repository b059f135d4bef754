"""local_response_norm (ops/normalization_more.py): the window's mean over channels as
shifted slices; values and gradients equal PyTorch's for every rank, odd and even sizes and
windows wider than the channels."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(2, 6, 9), (2, 7, 5, 4), (2, 5, 3, 4, 2), (1, 2, 3, 3)])
@pytest.mark.parametrize("size", [1, 2, 5])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_local_response_norm_matches_pytorch(shape, size, dtype, tol):
    rng = np.random.default_rng(sum(shape) + size)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    got = []
    for lib in (torch, tj):
        xt = lib.tensor(x, requires_grad=True)
        out = lib.nn.functional.local_response_norm(xt, size, alpha=0.1, beta=0.75, k=1.5)
        out.backward(lib.tensor(g))
        got.append((out.detach().numpy(), xt.grad.numpy()))
    assert got[1][0].dtype == dtype
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=tol * 10, atol=tol * 10)
