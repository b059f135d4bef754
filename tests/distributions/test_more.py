"""Binomial's enumerate_support and entropy against PyTorch."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.distributions as D

torch = pytest.importorskip("torch", reason="compares with PyTorch")


@pytest.mark.parametrize("count, probs", [(5, [0.2, 0.5, 0.9]), ([[3.0], [3.0]], [0.2, 0.7]), (1, 0.3), (0, [0.4])])
def test_binomial_entropy_and_support_match_pytorch(count, probs):
    def make(lib):
        c = count if isinstance(count, int) else lib.tensor(count, dtype=lib.float64)
        return lib.distributions.Binomial(c, probs=lib.tensor(probs, dtype=lib.float64))
    mine, ref = make(tj), make(torch)
    np.testing.assert_allclose(mine.entropy().numpy(), ref.entropy().numpy(), rtol=1e-12)
    for expand in (True, False):
        assert tuple(mine.enumerate_support(expand).shape) == tuple(ref.enumerate_support(expand).shape)
    np.testing.assert_array_equal(mine.enumerate_support().numpy(), ref.enumerate_support().numpy())


def test_binomial_with_unequal_counts_has_no_entropy():
    with pytest.raises(NotImplementedError, match="Inhomogeneous total count"):
        D.Binomial(tj.tensor([2.0, 3.0]), probs=tj.tensor([0.2, 0.7])).entropy()


@pytest.mark.parametrize("make", [
    lambda m: (m.distributions.Geometric(m.tensor([0.3, 0.6])), m.distributions.Geometric(m.tensor([0.5, 0.2]))),
    lambda m: (m.distributions.Binomial(m.tensor([5.0, 3.0]), m.tensor([0.3, 0.6])),
               m.distributions.Binomial(3, m.tensor([0.5, 0.2]))),
    lambda m: (m.distributions.LogNormal(m.tensor([0.0, 1.0]), m.tensor([1.0, 2.0])),
               m.distributions.LogNormal(m.tensor([1.0, 1.0]), m.tensor([2.0, 2.0])))], ids=["geometric", "binomial", "lognormal"])
def test_kl_divergence_of_more_pairs_matches_pytorch(make):
    got, want = [m.distributions.kl_divergence(*make(m)).numpy() for m in (tj, torch)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(NotImplementedError):   # (fewer trials in p: undefined in PyTorch too)
        D.kl_divergence(D.Binomial(2, tj.tensor(0.5)), D.Binomial(3, tj.tensor(0.5)))
