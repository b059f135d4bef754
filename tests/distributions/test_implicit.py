"""Gamma's implicit reparameterization against PyTorch's `_standard_gamma_grad` on the same
draws, the distributions reparameterized through it (Chi2, StudentT, Beta, Dirichlet,
InverseGamma, FisherSnedecor), ExponentialFamily's Bregman entropy and KL, and `expand`."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.distributions as D
from tracejit.distributions.implicit import dirichlet_grad, standard_gamma_grad

torch = pytest.importorskip("torch", reason="compares with PyTorch")
TD = torch.distributions

R = np.random.default_rng(0)
POS, POS2 = R.uniform(0.5, 3.0, (4,)), R.uniform(0.5, 3.0, (4,))


def test_standard_gamma_grad_matches_torch_in_every_regime():
    alpha = np.concatenate([R.uniform(0.05, 3, 60), R.uniform(3, 20, 60), R.uniform(20, 500, 60)])
    x = np.concatenate([R.gamma(alpha), R.uniform(0.01, 0.79, 180)])   # near the mode and x < 0.8
    alpha = np.concatenate([alpha, alpha])
    want = torch._standard_gamma_grad(torch.tensor(alpha), torch.tensor(x)).numpy()
    np.testing.assert_allclose(standard_gamma_grad(alpha, x), want, rtol=1e-8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gamma_rsample_gradient_matches_torch_on_the_same_draws(dtype):
    a = tj.tensor(POS * 3, dtype=getattr(tj, dtype), requires_grad=True)
    b = tj.tensor(POS2, dtype=getattr(tj, dtype), requires_grad=True)
    tj.manual_seed(0)
    x = D.Gamma(a, b).rsample((6,))
    assert x.dtype == a.dtype and tuple(x.shape) == (6, 4) and D.Gamma(a, b).has_rsample
    x.sum().backward()
    # PyTorch: d x / d a = _standard_gamma_grad(a, x * b) / b, d x / d b = -x / b
    xs = x.detach().numpy().astype(np.float64)
    ta, tb = torch.tensor(POS * 3), torch.tensor(POS2)
    want_a = (torch._standard_gamma_grad(ta.expand(6, 4), torch.tensor(xs) * tb) / tb).sum(0).numpy()
    rtol = 1e-5 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(a.grad.numpy(), want_a, rtol=rtol)
    np.testing.assert_allclose(b.grad.numpy(), (-xs / POS2).sum(0), rtol=rtol)


@pytest.mark.parametrize("name, args, param", [
    ("Gamma", (2.5, 1.5), 0), ("Chi2", (3.0,), 0), ("StudentT", (9.0, 0.5, 2.0), 0), ("Beta", (2.0, 3.0), 0),
    ("InverseGamma", (4.0, 2.0), 0), ("FisherSnedecor", (6.0, 12.0), 1)])
def test_rsample_gradients_are_unbiased(name, args, param):
    """E[d x / d theta] over many draws is d E[x] / d theta (PyTorch's mean's gradient; the
    variance's for Student's t, whose mean does not depend on df)."""
    tj.manual_seed(0)
    ts = [tj.tensor(a, dtype=tj.float64, requires_grad=True) for a in args]
    d = getattr(D, name)(*ts)
    assert d.has_rsample
    x = d.rsample((40000,))
    moment = "variance" if name == "StudentT" else "mean"
    stat = ((x - ts[1]) ** 2).mean() if name == "StudentT" else x.mean()
    g = tj.autograd.grad(stat, ts[param])[0].numpy()
    tt = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    want = torch.autograd.grad(getattr(getattr(TD, name)(*tt), moment), tt[param])[0].numpy()
    np.testing.assert_allclose(g, want, rtol=0.05, atol=0.01)
    assert abs(float(x.detach().mean()) - float(d.mean)) < 0.05 * max(1.0, abs(float(d.mean)))


def test_dirichlet_rsample_gradient_is_unbiased_and_on_the_simplex():
    tj.manual_seed(1)
    c = tj.tensor([1.5, 2.0, 4.0], dtype=tj.float64, requires_grad=True)
    x = D.Dirichlet(c).rsample((40000,))
    np.testing.assert_allclose(x.detach().numpy().sum(-1), 1.0, rtol=1e-12)
    g = tj.autograd.grad(x[:, 0].mean(), c)[0].numpy()
    tc = torch.tensor([1.5, 2.0, 4.0], dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(TD.Dirichlet(tc).mean[0], tc)[0].numpy()
    np.testing.assert_allclose(g, want, atol=0.01)


def test_dirichlet_grad_matches_torch_in_every_regime():
    """Near 0, near 1, both concentrations large, and the rational region between."""
    alpha, beta = np.exp(R.uniform(-3, 4, 4000)), np.exp(R.uniform(-3, 4, 4000))
    x = R.beta(alpha, beta).clip(1e-12, 1 - 1e-12)
    want = torch._dirichlet_grad(*(torch.tensor(v) for v in (x, alpha, alpha + beta))).numpy()
    np.testing.assert_allclose(dirichlet_grad(x, alpha, alpha + beta), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dirichlet_and_beta_rsample_gradients_match_torch_per_draw(dtype):
    """PyTorch's _Dirichlet backward on the same draws: G * (g - sum(x * g)), G its
    `_dirichlet_grad`; Beta is the first coordinate of Dirichlet((c1, c0))."""
    dt, rtol = getattr(tj, dtype), (2e-4 if dtype == "float32" else 1e-8)
    conc = np.stack([POS, POS2 * 4, POS2 / 2], -1)                       # (4, 3)
    c = tj.tensor(conc, dtype=dt, requires_grad=True)
    x = D.Dirichlet(c).rsample((5,))
    w = R.standard_normal(tuple(x.shape))
    (x * tj.tensor(w, dtype=dt)).sum().backward()
    xs, tc = torch.tensor(x.detach().numpy().astype(np.float64)), torch.tensor(conc).expand(5, 4, 3)
    G = torch._dirichlet_grad(xs, tc, tc.sum(-1, True).expand_as(tc))
    tw = torch.tensor(w)
    want = (G * (tw - (xs * tw).sum(-1, True))).sum(0).numpy()
    np.testing.assert_allclose(c.grad.numpy(), want, rtol=rtol, atol=1e-6)

    a = tj.tensor(POS, dtype=dt, requires_grad=True)
    b = tj.tensor(POS2, dtype=dt, requires_grad=True)
    y = D.Beta(a, b).rsample((6,))
    assert tuple(y.shape) == (6, 4) and y.dtype == dt
    y.sum().backward()
    ys = torch.tensor(y.detach().numpy().astype(np.float64))
    tc = torch.stack([torch.tensor(POS), torch.tensor(POS2)], -1).expand(6, 4, 2)
    xs = torch.stack([ys, 1 - ys], -1)
    G = torch._dirichlet_grad(xs, tc, tc.sum(-1, True).expand_as(tc))
    go = torch.stack([torch.ones_like(ys), torch.zeros_like(ys)], -1)
    want = (G * (go - (xs * go).sum(-1, True))).sum(0).numpy()
    np.testing.assert_allclose(a.grad.numpy(), want[:, 0], rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), want[:, 1], rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("name, args", [("Normal", (POS - 1, POS2)), ("Gamma", (POS, POS2)), ("Exponential", (POS,)),
                                        ("Bernoulli", (POS / 4,)), ("ContinuousBernoulli", (POS / 4,))])
def test_exponential_family_entropy_is_the_bregman_one(name, args):
    """The generic entropy (from the log-normalizer) equals PyTorch's and the closed form."""
    got = D.ExponentialFamily.entropy(getattr(D, name)(*[tj.tensor(a) for a in args]))
    want = TD.ExponentialFamily.entropy(getattr(TD, name)(*[torch.tensor(a) for a in args]))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-9)
    closed = getattr(D, name)(*[tj.tensor(a) for a in args]).entropy()
    np.testing.assert_allclose(got.detach().numpy(), closed.numpy(), rtol=1e-8)
    assert isinstance(getattr(D, name)(*[tj.tensor(a) for a in args]), D.ExponentialFamily)


@pytest.mark.parametrize("name, p, q", [("Gamma", (POS, POS2), (POS2, POS)), ("Beta", (POS, POS2), (POS2, POS)),
                                        ("Poisson", (POS,), (POS2,)),
                                        ("Dirichlet", (np.stack([POS, POS2]),), (np.stack([POS2, POS]),))])
def test_exponential_family_kl_matches_torch_with_gradients(name, p, q):
    res = []
    for lib in (torch, tj):
        ps = [lib.tensor(a, requires_grad=True) for a in p]
        kl = lib.distributions.kl_divergence(getattr(lib.distributions, name)(*ps),
                                             getattr(lib.distributions, name)(*[lib.tensor(a) for a in q]))
        res.append((kl.detach().numpy(), lib.autograd.grad(kl.sum(), ps)[0].numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-8)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-7)


@pytest.mark.parametrize("name, p, q", [("Gamma", (POS, POS2), (POS2, POS)), ("Beta", (POS, POS2), (POS2, POS)),
                                        ("Normal", (POS, POS2), (POS2, POS))])
def test_bregman_kl_equals_the_closed_form_with_gradients(name, p, q):
    from tracejit.distributions.exp_family import _kl_expfamily_expfamily
    res = []
    for kl in (D.kl_divergence, _kl_expfamily_expfamily):
        ps = [tj.tensor(a, requires_grad=True) for a in p]
        v = kl(getattr(D, name)(*ps), getattr(D, name)(*[tj.tensor(a) for a in q]))
        res.append((v.detach().numpy(), [g.numpy() for g in tj.autograd.grad(v.sum(), ps)]))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-8)
    for a, b in zip(res[1][1], res[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-7)


def test_cross_family_bregman_kl_is_refused():
    class Other(D.ExponentialFamily):
        pass
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Poisson(tj.tensor(1.0)), Other())


@pytest.mark.parametrize("make", [
    lambda: D.Normal(tj.tensor([0.0, 1.0]), tj.tensor([1.0, 2.0])),
    lambda: D.Bernoulli(logits=tj.tensor([0.3, -1.0])),
    lambda: D.Gamma(tj.tensor([1.0, 2.0]), tj.tensor(1.5)),
    lambda: D.Dirichlet(tj.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])),
    lambda: D.HalfCauchy(tj.tensor([1.0, 2.0])),
    lambda: D.VonMises(tj.tensor([0.0, 1.0]), tj.tensor([2.0, 3.0]))])
def test_expand_broadcasts_the_batch(make):
    d = make()
    e = d.expand((3,) + tuple(d.batch_shape))
    assert tuple(e.batch_shape) == (3,) + tuple(d.batch_shape) and e.event_shape == d.event_shape
    x = e.sample((5,))
    assert tuple(x.shape) == (5, 3) + tuple(d.batch_shape) + tuple(d.event_shape)
    lp, lp0 = e.log_prob(x), d.log_prob(x)
    np.testing.assert_allclose(lp.numpy(), lp0.numpy(), rtol=1e-6)
    with pytest.raises(Exception):
        d.expand((7, 5))
