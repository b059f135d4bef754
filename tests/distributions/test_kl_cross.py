"""distributions/kl_cross.py: KL divergences across families equal PyTorch's, infinities included."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_PARAMS = {
    "Bernoulli": ([0.3, 0.7],), "Poisson": ([1.5, 0.4],), "Beta": ([1.5, 2.5], [2.0, 0.7]),
    "Exponential": ([1.3, 0.4],), "Gamma": ([2.0, 0.6], [1.5, 3.0]), "Gumbel": ([0.2, -1.0], [1.1, 0.5]),
    "Laplace": ([0.3, -0.5], [0.8, 1.4]), "Normal": ([0.3, -0.7], [0.9, 1.6]), "Pareto": ([0.5, 1.0], [2.5, 3.5]),
    "Binomial": (5, [0.3, 0.6]),
}
_UNIFORMS = [([0.1, 0.3], [2.0, 0.9]), ([-0.5, 1.2], [0.4, 1.5]), ([0.2, 0.05], [0.8, 0.5])]
_PAIRS = ["Bernoulli Poisson", "Beta Exponential", "Beta Gamma", "Beta Normal", "Beta Pareto", "Beta Uniform",
          "Exponential Beta", "Exponential Gamma", "Exponential Gumbel", "Exponential Normal", "Exponential Pareto",
          "Exponential Uniform", "Gamma Beta", "Gamma Exponential", "Gamma Gumbel", "Gamma Normal", "Gamma Pareto",
          "Gamma Uniform", "Gumbel Beta", "Gumbel Exponential", "Gumbel Gamma", "Gumbel Normal", "Gumbel Pareto",
          "Gumbel Uniform", "Laplace Beta", "Laplace Exponential", "Laplace Gamma", "Laplace Normal",
          "Laplace Pareto", "Laplace Uniform", "Normal Beta", "Normal Exponential", "Normal Gamma", "Normal Gumbel",
          "Normal Laplace", "Normal Pareto", "Normal Uniform", "Pareto Beta", "Poisson Bernoulli",
          "Poisson Binomial", "Uniform Beta", "Uniform Exponential", "Uniform Gamma", "Uniform Gumbel",
          "Uniform Normal", "Uniform Pareto"]


def _make(lib, name, uniform):
    args = _UNIFORMS[uniform] if name == "Uniform" else _PARAMS[name]
    args = [a if isinstance(a, int) else lib.tensor(np.array(a, np.float64)) for a in args]
    return getattr(lib.distributions, name)(*args)


@pytest.mark.parametrize("pair", _PAIRS)
def test_cross_family_kl_matches_pytorch(pair):
    pn, qn = pair.split()
    for u in range(len(_UNIFORMS)):   # (a uniform inside, across and beside the other's support)
        want = torch.distributions.kl_divergence(_make(torch, pn, u), _make(torch, qn, u)).numpy()
        got = tj.distributions.kl_divergence(_make(tj, pn, u), _make(tj, qn, u)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-9)


def test_cross_family_kl_has_gradients():
    loc = tj.tensor([0.3, -0.7], dtype=tj.float64, requires_grad=True)
    tl = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    for lib, x in ((tj, loc), (torch, tl)):
        d = lib.distributions
        d.kl_divergence(d.Normal(x, lib.ones(2, dtype=lib.float64)), d.Laplace(lib.zeros(2, dtype=lib.float64),
                                                                           lib.ones(2, dtype=lib.float64))).sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), tl.grad.numpy(), rtol=1e-9)
