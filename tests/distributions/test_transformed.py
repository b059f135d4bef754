"""TransformedDistribution with PyTorch's transforms and MixtureSameFamily, against
PyTorch's values for the same parameters: log_prob (and its gradients), the cached inverse
of a tanh-squashed sample, mean, variance, cdf, sample shapes, and the errors."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _both(a):
    return tj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def test_squashed_gaussian_log_prob_and_gradients_match_torch():
    rng = np.random.default_rng(0)
    mu, sd = rng.standard_normal((4, 2)), rng.random((4, 2)) + 0.3
    x = rng.standard_normal((4, 2)) * 2
    out = []
    for lib, (m, s) in ((tj, _both(mu)[0:1] + _both(sd)[0:1]), (torch, _both(mu)[1:] + _both(sd)[1:])):
        D = lib.distributions
        d = D.TransformedDistribution(D.Normal(m, s), [D.TanhTransform(), D.AffineTransform(0.5, 2.0)])
        y = lib.tensor(np.tanh(x) * 2 + 0.5)
        lp = d.log_prob(y).sum()
        lp.backward()
        out.append((lp.item(), m.grad.numpy(), s.grad.numpy()))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_cached_tanh_inverse_returns_the_pre_image():
    D = tj.distributions
    t = D.TanhTransform(cache_size=1)
    x = tj.tensor([20.0, -30.0, 0.5])
    y = t(x)
    assert t.inv(y) is x            # 20 -> tanh is 1.0: only the cache can invert it
    d = D.TransformedDistribution(D.Normal(tj.zeros(3), tj.ones(3)), [t])
    assert np.isfinite(d.log_prob(y).numpy()).all()
    with pytest.raises(ValueError, match="cache_size"):
        D.TanhTransform(cache_size=2)


@pytest.mark.parametrize("sample_shape", [(), (5,), (2, 3)])
def test_mixture_same_family_matches_torch(sample_shape):
    rng = np.random.default_rng(1)
    logits, mu, sd = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.random((4, 3)) + 0.5
    y = rng.standard_normal((4,))
    vals = []
    for lib in (tj, torch):
        D = lib.distributions
        mix = D.MixtureSameFamily(D.Categorical(logits=lib.tensor(logits)), D.Normal(lib.tensor(mu), lib.tensor(sd)))
        vals.append([mix.log_prob(lib.tensor(y)).numpy(), mix.mean.numpy(), mix.variance.numpy(),
                     mix.cdf(lib.tensor(y)).numpy()])
        assert tuple(mix.sample(sample_shape).shape) == tuple(sample_shape) + (4,)
    for a, b in zip(*vals):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_mixture_of_multivariate_components_and_errors():
    D = tj.distributions
    comp = D.Independent(D.Normal(tj.zeros(2, 3, 4), tj.ones(2, 3, 4)), 1)
    mix = D.MixtureSameFamily(D.Categorical(logits=tj.zeros(2, 3)), comp)
    assert tuple(mix.batch_shape) == (2,) and tuple(mix.event_shape) == (4,)
    assert tuple(mix.sample((6,)).shape) == (6, 2, 4)
    np.testing.assert_allclose(mix.log_prob(tj.zeros(2, 4)).numpy(), [-4 * 0.5 * np.log(2 * np.pi)] * 2)
    with pytest.raises(ValueError, match="3 components but"):
        D.MixtureSameFamily(D.Categorical(logits=tj.zeros(3)), D.Normal(tj.zeros(4), tj.ones(4)))


def test_kl_divergence_of_equally_transformed_distributions_is_the_bases():
    def make(m, scale):
        d = m.distributions
        return [d.TransformedDistribution(d.Normal(m.tensor([0.0, 1.0]) + i, m.ones(2)), [d.transforms.AffineTransform(1.0, s)])
                for i, s in ((0, 2.0), (1, scale))]
    for m in (tj, torch):
        assert m.distributions.kl_divergence(*make(m, 2.0)).tolist() == [0.5, 0.5]
        with pytest.raises(NotImplementedError):
            m.distributions.kl_divergence(*make(m, 3.0))
    got, want = [m.distributions.kl_divergence(m.distributions.LogisticNormal(m.tensor([0.0, 1.0]), m.tensor([1.0, 2.0])),
                                               m.distributions.LogisticNormal(m.tensor([1.0, 1.0]), m.tensor([2.0, 2.0])))
                 for m in (tj, torch)]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
