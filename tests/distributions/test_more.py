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


_L = np.array([[1.5, 0.0, 0.0], [0.4, 0.8, 0.0], [-0.3, 0.2, 1.1]])


@pytest.mark.parametrize("loc_shape, given", [((4, 1, 3), "scale_tril"), ((3,), "batched_tril"),
                                              ((4, 1, 3), "covariance_matrix"), ((3,), "precision_matrix"),
                                              ((3,), "above_diagonal")])
def test_multivariate_normal_broadcasts_and_reads_the_lower_triangle_as_pytorch(loc_shape, given):
    """Batched loc with one factor (and the reverse) gives full-batch parameters; log_prob
    and KL read the factor's lower triangle only, so what lies above it (validation off)
    changes neither the values nor gets a gradient."""
    lb = np.stack([_L, _L * 1.3])
    matrix = {"scale_tril": _L, "batched_tril": lb, "covariance_matrix": lb @ lb.transpose(0, 2, 1),
              "precision_matrix": np.linalg.inv(_L @ _L.T), "above_diagonal": _L + np.triu(np.ones((3, 3)), 1)}[given]
    kw = "scale_tril" if given in ("batched_tril", "above_diagonal") else given
    loc = np.linspace(-1.0, 1.0, int(np.prod(loc_shape))).reshape(loc_shape)
    x = np.cos(np.arange(5 * 4 * 2 * 3)).reshape(5, 4, 2, 3)

    def run(m):
        lt, mt = m.tensor(loc, requires_grad=True), m.tensor(matrix, requires_grad=True)
        d = m.distributions.MultivariateNormal(lt, validate_args=False, **{kw: mt})
        q = m.distributions.MultivariateNormal(m.zeros(3, dtype=m.float64), scale_tril=m.tensor(_L * 0.9))
        out = [d.mean, d.variance, d.stddev, d.scale_tril, d.covariance_matrix, d.entropy(), d.log_prob(m.tensor(x)),
               m.distributions.kl_divergence(d, q)]
        total = sum(o.sum() * (i + 1) for i, o in enumerate(out))
        return [o.detach().numpy() for o in out] + list(m.autograd.grad(total, [lt, mt]))

    for got, want in zip(run(tj), run(torch)):
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(np.asarray(got), want.numpy() if hasattr(want, "numpy") else want,
                                   rtol=1e-9, atol=1e-9)
