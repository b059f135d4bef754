"""Weibull, Pareto, Kumaraswamy, InverseGamma, FisherSnedecor and NegativeBinomial against
PyTorch: log_prob, entropy, moments, cdf/icdf on fixed points, their gradients, pathwise
gradients of rsample on the same draws, sample statistics, validation and KL pairs."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.distributions as D

torch = pytest.importorskip("torch", reason="compares with PyTorch")
TD = torch.distributions

R = np.random.default_rng(0)
POS, POS2 = R.uniform(0.5, 3.0, (4,)), R.uniform(0.5, 3.0, (4,))
BIG = R.uniform(4.5, 9.0, (4,))
P01 = R.uniform(0.05, 0.95, (4,))
COUNTS = np.array([0.0, 1.0, 3.0, 7.0])

# name: (constructor args, a value in the support, what to compare)
CASES = {
    "Weibull": ((POS, POS2), POS2, ("mean", "variance", "mode", "entropy", "cdf", "icdf")),
    "Pareto": ((POS, BIG), POS + P01, ("mean", "variance", "mode", "entropy", "cdf", "icdf")),
    "Kumaraswamy": ((POS, POS2), P01, ("mean", "variance", "entropy", "cdf", "icdf")),
    "InverseGamma": ((BIG, POS2), POS, ("mean", "variance", "mode", "entropy")),
    "FisherSnedecor": ((POS, BIG), POS2, ("mean", "variance", "mode")),
    "NegativeBinomial": ((POS, P01), COUNTS, ("mean", "variance", "mode")),
}


def _make(lib, name, args, grad=False):
    ts = [lib.tensor(a, requires_grad=grad) for a in args]
    return getattr(lib.distributions, name)(*ts), ts


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    args, value, what = CASES[name]
    out = {}
    for lib in (torch, tj):
        d, ts = _make(lib, name, args, grad=True)
        v = lib.tensor(value)
        res = {"log_prob": d.log_prob(v)}
        for w in what:
            if w in ("cdf",):
                res[w] = d.cdf(v)
            elif w == "icdf":
                res[w] = d.icdf(lib.tensor(P01))
            elif w == "entropy":
                res[w] = d.entropy()
            else:
                res[w] = getattr(d, w)
        total = sum(r.sum() for k, r in res.items() if k != "mode")
        grads = lib.autograd.grad(total, ts)
        out[lib] = ({k: r.detach().numpy() for k, r in res.items()}, [g.numpy() for g in grads])
    (want, gw), (got, gg) = out[torch], out[tj]
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-12, err_msg=k)
    for a, b in zip(gg, gw):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["Weibull", "Pareto", "Kumaraswamy"])
def test_rsample_pathwise_gradient_matches_torch_icdf(name):
    """rsample is the icdf of a uniform draw: its gradient on the same draw is PyTorch's icdf's."""
    args, _, _ = CASES[name]
    u = R.uniform(0.05, 0.95, (4,))
    grads = []
    for lib in (torch, tj):
        d, ts = _make(lib, name, args, grad=True)
        grads.append([g.numpy() for g in lib.autograd.grad(d.icdf(lib.tensor(u)).sum(), ts)])
    for a, b in zip(grads[1], grads[0]):
        np.testing.assert_allclose(a, b, rtol=1e-9)
    d, ts = _make(tj, name, args, grad=True)
    x = d.rsample((3,))
    assert tuple(x.shape) == (3, 4) and d.has_rsample
    x.sum().backward()
    assert all(t.grad is not None and np.isfinite(t.grad.numpy()).all() for t in ts)


@pytest.mark.parametrize("name, args, tol", [
    ("Weibull", (2.0, 1.5), 0.03), ("Pareto", (1.0, 5.0), 0.03), ("Kumaraswamy", (2.0, 3.0), 0.03),
    ("InverseGamma", (6.0, 2.0), 0.03), ("FisherSnedecor", (5.0, 12.0), 0.05),
    ("NegativeBinomial", (4.0, 0.3), 0.03)])
def test_sample_statistics(name, args, tol):
    tj.manual_seed(0)
    d = getattr(D, name)(*[tj.tensor(a, dtype=tj.float64) for a in args])
    x = d.sample((40000,)).numpy()
    assert x.shape == (40000,)
    assert abs(x.mean() - float(d.mean)) < tol * max(1.0, abs(float(d.mean)))
    assert abs(x.var() - float(d.variance)) < 4 * tol * max(1.0, float(d.variance))
    assert bool(d.support.check(tj.tensor(x)).all())


def test_infinite_and_undefined_moments_follow_torch():
    for name, args in [("Pareto", (1.0, 0.8)), ("InverseGamma", (0.5, 1.0)), ("FisherSnedecor", (3.0, 1.5))]:
        want = getattr(TD, name)(*[torch.tensor(a) for a in args])
        got = getattr(D, name)(*[tj.tensor(a) for a in args])
        for k in ("mean", "variance"):
            np.testing.assert_array_equal(getattr(got, k).numpy(), getattr(want, k).numpy(), err_msg=name + k)


def test_negative_binomial_logits_and_zero_count():
    lg = R.standard_normal(4)
    want = TD.NegativeBinomial(torch.tensor(POS), logits=torch.tensor(lg)).log_prob(torch.tensor(COUNTS))
    got = D.NegativeBinomial(tj.tensor(POS), logits=tj.tensor(lg)).log_prob(tj.tensor(COUNTS))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)
    z = D.NegativeBinomial(tj.tensor(0.0), probs=tj.tensor(0.4)).log_prob(tj.tensor(0.0))
    assert float(z) == 0.0
    with pytest.raises(ValueError, match="probs"):
        D.NegativeBinomial(2.0)


@pytest.mark.parametrize("name, args, value", [
    ("Weibull", (-1.0, 1.0), None), ("Pareto", (1.0, 0.0), None), ("Kumaraswamy", (1.0, -2.0), None),
    ("InverseGamma", (0.0, 1.0), None), ("FisherSnedecor", (1.0, -1.0), None),
    ("NegativeBinomial", (2.0, 1.5), None), ("Pareto", (2.0, 1.0), 1.5), ("Kumaraswamy", (1.0, 2.0), 1.5)])
def test_validation_errors(name, args, value):
    if value is None:
        with pytest.raises(ValueError, match="Expected parameter"):
            getattr(D, name)(*[tj.tensor(a) for a in args])
    else:
        d = getattr(D, name)(*[tj.tensor(a) for a in args])
        with pytest.raises(ValueError, match="support"):
            d.log_prob(tj.tensor(value))


@pytest.mark.parametrize("qname, qargs", [("Pareto", (BIG * 0 + 0.6, POS2)), ("Exponential", (POS2,)),
                                          ("Gamma", (POS, POS2)), ("Normal", (POS2, POS)),
                                          ("Uniform", (POS * 0, BIG * 3))])
def test_kl_pareto_matches_torch(qname, qargs):
    p_args = (POS + 0.2, np.array([0.8, 1.5, 2.5, 5.0]))
    res = []
    for lib in (torch, tj):
        p = lib.distributions.Pareto(*[lib.tensor(a) for a in p_args])
        q = getattr(lib.distributions, qname)(*[lib.tensor(a) for a in qargs])
        res.append(lib.distributions.kl_divergence(p, q).numpy())
    np.testing.assert_allclose(res[1], res[0], rtol=1e-9)


def test_gamma_and_chi2_cdf_match_pytorch():
    torch = pytest.importorskip("torch")
    v = [0.1, 0.5, 2.0, 7.0]
    got = tj.distributions.Gamma(tj.tensor(2.5), tj.tensor(1.5)).cdf(tj.tensor(v)).numpy()
    want = torch.distributions.Gamma(torch.tensor(2.5), torch.tensor(1.5)).cdf(torch.tensor(v)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(tj.distributions.Chi2(tj.tensor(3.0)).cdf(tj.tensor(v)).numpy(),
                               torch.distributions.Chi2(torch.tensor(3.0)).cdf(torch.tensor(v)).numpy(), rtol=1e-5)


def test_kumaraswamy_log_prob_at_the_ends_of_its_support_is_pytorchs():
    a, b = np.array([0.3, 2.0, 0.5, 4.0]), np.array([0.4, 1.5, 3.0, 0.2])
    v = np.array([1.0, 0.0, 0.3, 0.999])
    want = TD.Kumaraswamy(torch.tensor(a), torch.tensor(b)).log_prob(torch.tensor(v)).numpy()
    got = D.Kumaraswamy(tj.tensor(a), tj.tensor(b)).log_prob(tj.tensor(v)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert np.isnan(got[:2]).all()
