"""special.py composites in their tails: erfcx and log_ndtr keep their digits where a direct
formula overflows or underflows, as PyTorch's."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

X = [-1e4, -88.0, -30.0, -10.0, -3.0, -1.0, -0.5, 0.0, 0.5, 3.0, 10.0, 26.0, 100.0, 1e10,
     float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("name", ["erfcx", "log_ndtr"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tails_match_pytorch(name, dtype):
    want = getattr(torch.special, name)(torch.tensor(X, dtype=getattr(torch, dtype))).numpy()
    got = getattr(tj.special, name)(tj.tensor(X, dtype=getattr(tj, dtype))).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-9)


@pytest.mark.parametrize("name", ["erfcx", "log_ndtr"])
def test_gradients_match_pytorch(name):
    xs = [-5.0, -3.0, 0.5, 30.0]
    a, b = tj.tensor(xs, dtype=tj.float64, requires_grad=True), torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    getattr(tj.special, name)(a).sum().backward()
    getattr(torch.special, name)(b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ndtri_of_small_and_out_of_range_probabilities_as_pytorch(dtype):
    """sqrt(2) erfinv(2p - 1) gave -inf for p = 1e-30 (2p - 1 rounds to -1) and for p < 0."""
    p = [0.0, 1e-30, 1e-10, 1e-3, 0.0099, 0.3, 0.9, 1.0, -1e-30, 1.5, float("nan")]
    want = torch.special.ndtri(torch.tensor(p, dtype=getattr(torch, dtype))).numpy()
    got = tj.special.ndtri(tj.tensor(p, dtype=getattr(tj, dtype))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12)
