"""The relaxed, straight-through, Student-t, chi-squared, half-Cauchy and multinomial
distributions against PyTorch: log_prob (and its gradients where reparameterized), entropy,
mean and variance for the same parameters; samples' shapes and supports."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _both(a):
    return tj.tensor(a), torch.tensor(a)


def _cases(lib, t):
    D = lib.distributions
    logits = t(np.array([[0.3, -1.0, 0.5], [1.2, 0.1, -0.4]]))
    return {
        "RelaxedOneHotCategorical": (D.RelaxedOneHotCategorical(t(0.7), logits=logits),
                                     t(np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]))),
        "RelaxedBernoulli": (D.RelaxedBernoulli(t(0.5), probs=t(np.array([0.2, 0.7]))),
                             t(np.array([0.1, 0.95]))),
        "StudentT": (D.StudentT(t(np.array([3.0, 5.5])), t(np.array([0.5, -1.0])), t(np.array([2.0, 0.7]))),
                     t(np.array([1.5, -0.2]))),
        "Chi2": (D.Chi2(t(np.array([2.0, 4.5]))), t(np.array([1.3, 0.4]))),
        "HalfCauchy": (D.HalfCauchy(t(np.array([1.0, 2.5]))), t(np.array([0.3, 4.0]))),
        "Multinomial": (D.Multinomial(5, probs=t(np.array([0.2, 0.3, 0.5]))), t(np.array([1.0, 1.0, 3.0]))),
    }


@pytest.mark.parametrize("name", ["RelaxedOneHotCategorical", "RelaxedBernoulli", "StudentT", "Chi2",
                                  "HalfCauchy", "Multinomial"])
def test_log_prob_and_moments_match_torch(name):
    d, v = _cases(tj, lambda a: tj.tensor(a, dtype=tj.float64))[name]
    td, tv = _cases(torch, lambda a: torch.tensor(a, dtype=torch.float64))[name]
    np.testing.assert_allclose(d.log_prob(v).numpy(), td.log_prob(tv).numpy(), rtol=1e-10)
    for attr in ("mean", "variance", "entropy"):
        try:
            want = getattr(td, attr)
            want = want() if callable(want) else want
        except NotImplementedError:
            continue
        got = getattr(d, attr)
        got = got() if callable(got) else got
        # (PyTorch's multinomial entropy takes lgamma of an int64 count in float32)
        tol = 1e-7 if (name, attr) == ("Multinomial", "entropy") else 1e-10
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, err_msg=attr)
    s = d.sample((4,))
    assert tuple(s.shape) == tuple(td.sample((4,)).shape)


def test_relaxed_samples_lie_on_the_simplex_and_carry_gradients():
    logits = tj.tensor([0.3, -1.0, 0.5], requires_grad=True)
    d = tj.distributions.RelaxedOneHotCategorical(tj.tensor(0.5), logits=logits)
    x = d.rsample((6,))
    np.testing.assert_allclose(x.sum(-1).detach().numpy(), np.ones(6), rtol=1e-6)
    (x[:, 0]).sum().backward()
    assert np.abs(logits.grad.numpy()).sum() > 0


def test_straight_through_passes_the_probability_gradient():
    grads = []
    for lib in (tj, torch):
        p = lib.tensor([0.2, 0.5, 0.3], dtype=lib.float64, requires_grad=True)
        s = lib.distributions.OneHotCategoricalStraightThrough(probs=p).rsample()
        (s * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum().backward()
        assert s.detach().sum().item() == 1.0
        grads.append(p.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    np.testing.assert_allclose(grads[0], [-1.1, -0.1, 0.9], rtol=1e-12)


def test_multinomial_entropy_is_exact():
    import itertools
    import math
    p, n = [0.2, 0.3, 0.5], 5
    exact = 0.0
    for k in itertools.product(range(n + 1), repeat=3):
        if sum(k) == n:
            lp = (math.lgamma(n + 1) - sum(math.lgamma(x + 1) for x in k)
                  + sum(x * math.log(q) for x, q in zip(k, p)))
            exact -= math.exp(lp) * lp
    got = tj.distributions.Multinomial(n, probs=tj.tensor(p, dtype=tj.float64)).entropy().item()
    assert got == pytest.approx(exact, rel=1e-13)
