"""mode, cdf and icdf of the distributions that have them in PyTorch (Beta, Dirichlet,
Binomial, OneHotCategorical modes; Laplace, Cauchy, Gumbel, HalfNormal, HalfCauchy,
LogNormal cdf/icdf; InverseGamma cdf) against PyTorch, with gradients."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

P = lambda *v: np.array(v, dtype=np.float64)  # noqa: E731
MODES = {
    "Beta": (P(1.5, 0.7, 3.0), P(2.0, 3.0, 0.5)),
    "Dirichlet": (np.array([[0.2, 0.5, 3.0], [0.2, 0.5, 0.9], [1.5, 2.0, 1.0]]),),
    "Binomial": (P(5, 7, 4), P(0.3, 0.8, 0.5)),
    "OneHotCategorical": (np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]),),
}
INVERTIBLE = {
    "Laplace": (P(0.3, -1.0), P(1.5, 0.7)), "Cauchy": (P(0.3, -1.0), P(1.5, 0.7)),
    "Gumbel": (P(0.3, -1.0), P(1.5, 0.7)), "HalfNormal": (P(1.5, 0.7),),
    "HalfCauchy": (P(1.5, 0.7),), "LogNormal": (P(0.3, -1.0), P(1.5, 0.7)),
}


@pytest.mark.parametrize("name", sorted(MODES))
def test_mode_matches_torch(name):
    got, want = (getattr(lib.distributions, name)(*[lib.tensor(a) for a in MODES[name]]).mode
                 for lib in (tj, torch))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(INVERTIBLE) + ["InverseGamma"])
def test_cdf_and_icdf_match_torch_with_gradients(name):
    args = (P(1.5, 2.7), P(2.0, 3.0)) if name == "InverseGamma" else INVERTIBLE[name]
    value, prob = P(0.4, 1.7), P(0.15, 0.8)
    res = []
    for lib in (torch, tj):
        ps = [lib.tensor(a, requires_grad=True) for a in args]
        d = getattr(lib.distributions, name)(*ps)
        outs = [d.cdf(lib.tensor(value))] + ([] if name == "InverseGamma" else [d.icdf(lib.tensor(prob))])
        # (PyTorch has no gradient of the incomplete gamma function in its shape)
        grads = [] if name == "InverseGamma" else lib.autograd.grad(sum(o.sum() for o in outs), ps)
        res.append([o.detach().numpy() for o in outs] + [g.numpy() for g in grads])
    for a, b in zip(res[1], res[0]):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-12)
