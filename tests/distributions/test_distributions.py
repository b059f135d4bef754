"""tracejit.distributions against PyTorch's documented definitions: log_prob, entropy,
moments, cdf/icdf, their gradients with respect to the parameters, reparameterized
samples (pathwise gradients), sample shapes and statistics, argument validation and
kl_divergence."""
import math

import numpy as np
import pytest

import tracejit as tj
import tracejit.distributions as D

torch = pytest.importorskip("torch", reason="compares with PyTorch")
TD = torch.distributions

R = np.random.default_rng(0)
PROBS = R.dirichlet(np.ones(5), size=3)            # (3, 5) rows on the simplex
LOGITS = R.standard_normal((3, 5))
P01 = R.uniform(0.05, 0.95, (4,))
LOC, SCALE = R.standard_normal((4,)), R.uniform(0.5, 2.0, (4,))
POS, POS2 = R.uniform(0.5, 3.0, (4,)), R.uniform(0.5, 3.0, (4,))

# name: (constructor args as arrays, a value in the support, property names to compare)
CASES = {
    "Normal": ((LOC, SCALE), R.standard_normal((2, 4)), ("mean", "stddev", "variance")),
    "Uniform": ((LOC, LOC + SCALE), LOC + 0.3 * SCALE, ("mean", "stddev", "variance")),
    "Exponential": ((POS,), POS2, ("mean", "variance")),
    "Laplace": ((LOC, SCALE), R.standard_normal((4,)), ("mean", "variance")),
    "Cauchy": ((LOC, SCALE), R.standard_normal((4,)), ()),
    "Gumbel": ((LOC, SCALE), R.standard_normal((4,)), ("mean", "variance")),
    "HalfNormal": ((SCALE,), POS, ("mean", "variance")),
    "LogNormal": ((LOC, SCALE), POS, ("mean", "variance")),
    "Gamma": ((POS, POS2), POS, ("mean", "variance")),
    "Beta": ((POS, POS2), P01, ("mean", "variance")),
    "Poisson": ((POS,), np.array([0.0, 1.0, 3.0, 2.0]), ("mean", "variance")),
    "Geometric": ((P01,), np.array([0.0, 1.0, 3.0, 2.0]), ("mean", "variance")),
}


def _make(lib, name, args, requires_grad=False):
    mod = TD if lib is torch else D
    ts = [lib.tensor(a, requires_grad=requires_grad) for a in args]
    return getattr(mod, name)(*ts), ts


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_entropy_and_moments_match_torch(name):
    args, value, props = CASES[name]
    t, targs = _make(torch, name, args, True)
    j, jargs = _make(tj, name, args, True)
    lt, lj = t.log_prob(torch.tensor(value)), j.log_prob(tj.tensor(value))
    np.testing.assert_allclose(lj.detach().numpy(), lt.detach().numpy(), rtol=1e-9, atol=1e-12)
    lt.sum().backward()
    lj.sum().backward()
    for a, b in zip(jargs, targs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-12)
    try:
        et = t.entropy()
    except NotImplementedError:
        et = None
    if et is not None:
        np.testing.assert_allclose(j.entropy().detach().numpy(), et.detach().numpy(), rtol=1e-9, atol=1e-12)
    for p in props:
        np.testing.assert_allclose(getattr(j, p).detach().numpy(), getattr(t, p).detach().numpy(),
                                   rtol=1e-9, atol=1e-12)
    assert tuple(j.batch_shape) == tuple(t.batch_shape)
    assert tuple(j.sample((7,)).shape) == tuple(t.sample((7,)).shape)


@pytest.mark.parametrize("given", ["probs", "logits"])
def test_categorical_as_a_policy(given):
    # A policy-gradient step: sample actions, -log_prob(action) * return, backward.
    param = PROBS if given == "probs" else LOGITS
    pt, pj = torch.tensor(param, requires_grad=True), tj.tensor(param, requires_grad=True)
    t, j = TD.Categorical(**{given: pt}), D.Categorical(**{given: pj})
    actions = np.array([4, 0, 2])
    returns = np.array([1.5, -0.5, 2.0])
    lt = (-t.log_prob(torch.tensor(actions)) * torch.tensor(returns)).sum() - 0.01 * t.entropy().sum()
    lj = (-j.log_prob(tj.tensor(actions)) * tj.tensor(returns)).sum() - 0.01 * j.entropy().sum()
    np.testing.assert_allclose(float(lj), float(lt.detach()), rtol=1e-10)
    lt.backward()
    lj.backward()
    np.testing.assert_allclose(pj.grad.numpy(), pt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(j.probs.detach().numpy(), t.probs.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(j.logits.detach().numpy(), t.logits.detach().numpy(), rtol=1e-10)
    assert tuple(j.sample().shape) == (3,) and tuple(j.sample((4, 2)).shape) == (4, 2, 3)
    assert j.sample().dtype is tj.int64
    np.testing.assert_array_equal(j.enumerate_support().numpy(), t.enumerate_support().numpy())


def test_categorical_sample_frequencies():
    tj.manual_seed(0)
    p = np.array([0.1, 0.6, 0.3])
    draws = D.Categorical(probs=tj.tensor(p)).sample((20000,)).numpy()
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / 20000, p, atol=0.015)


@pytest.mark.parametrize("given", ["probs", "logits"])
def test_bernoulli(given):
    param = P01 if given == "probs" else R.standard_normal(4)
    pt, pj = torch.tensor(param, requires_grad=True), tj.tensor(param, requires_grad=True)
    t, j = TD.Bernoulli(**{given: pt}), D.Bernoulli(**{given: pj})
    value = np.array([1.0, 0.0, 1.0, 1.0])
    lt = t.log_prob(torch.tensor(value)).sum() + t.entropy().sum()
    lj = j.log_prob(tj.tensor(value)).sum() + j.entropy().sum()
    np.testing.assert_allclose(float(lj), float(lt.detach()), rtol=1e-10)
    lt.backward()
    lj.backward()
    np.testing.assert_allclose(pj.grad.numpy(), pt.grad.numpy(), rtol=1e-9)
    np.testing.assert_allclose(j.variance.detach().numpy(), t.variance.detach().numpy(), rtol=1e-10)
    tj.manual_seed(1)
    draws = D.Bernoulli(probs=tj.tensor([0.2, 0.7])).sample((20000,)).numpy()
    np.testing.assert_allclose(draws.mean(0), [0.2, 0.7], atol=0.015)


@pytest.mark.parametrize("name", ["Normal", "Uniform", "Exponential", "Laplace", "LogNormal"])
def test_rsample_is_pathwise_differentiable(name):
    args, _, _ = CASES[name]
    tj.manual_seed(3)
    j, jargs = _make(tj, name, args, True)
    x = j.rsample((20000,))
    assert x.requires_grad and tuple(x.shape) == (20000, 4)
    x.mean(0).sum().backward()
    # the sample mean's gradient estimates d E[x] / d params (PyTorch's `mean`, differentiated)
    t, targs = _make(torch, name, args, True)
    t.mean.sum().backward()
    for a, b in zip(jargs, targs):    # (a parameter the mean ignores: no gradient in PyTorch)
        expect = b.grad.numpy() if b.grad is not None else np.zeros(a.shape)
        np.testing.assert_allclose(a.grad.numpy(), expect, rtol=0.1, atol=0.05)
    with pytest.raises(NotImplementedError, match="rsample"):
        D.Categorical(probs=tj.tensor(PROBS)).rsample()


def test_normal_and_uniform_statistics_and_cdf():
    tj.manual_seed(4)
    n = D.Normal(tj.tensor(1.5), tj.tensor(0.5))
    s = n.sample((40000,)).numpy()
    assert abs(s.mean() - 1.5) < 0.01 and abs(s.std() - 0.5) < 0.01
    u = D.Uniform(tj.tensor(-1.0), tj.tensor(3.0))
    s = u.sample((40000,)).numpy()
    assert s.min() >= -1.0 and s.max() < 3.0 and abs(s.mean() - 1.0) < 0.03
    v = np.array([-0.3, 1.2, 2.9])
    for tdist, jdist in ((TD.Normal(1.5, 0.5), n), (TD.Uniform(-1.0, 3.0), u)):
        np.testing.assert_allclose(jdist.cdf(tj.tensor(v)).numpy(), tdist.cdf(torch.tensor(v)).numpy(),
                                   rtol=1e-6, atol=1e-7)
        q = np.array([0.1, 0.5, 0.9])
        np.testing.assert_allclose(jdist.icdf(tj.tensor(q)).numpy(), tdist.icdf(torch.tensor(q)).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_validation_names_the_problem():
    with pytest.raises(ValueError, match="scale"):
        D.Normal(tj.tensor(0.0), tj.tensor(-1.0))
    with pytest.raises(ValueError, match="probs"):
        D.Bernoulli(probs=tj.tensor(1.5))
    with pytest.raises(ValueError, match="either `probs` or `logits`"):
        D.Categorical()
    with pytest.raises(ValueError, match="support"):
        D.Categorical(probs=tj.tensor([0.5, 0.5])).log_prob(tj.tensor(3))
    D.Normal(tj.tensor(0.0), tj.tensor(-1.0), validate_args=False)   # allowed when asked


def test_one_hot_categorical_checks_and_enumerates_its_support_as_torch():
    logits = R.standard_normal((2, 3)).astype(np.float32)
    # (validation asked for: torch.compile elsewhere in the process turns torch's default off)
    d = D.OneHotCategorical(logits=tj.tensor(logits), validate_args=True)
    td = TD.OneHotCategorical(logits=torch.tensor(logits), validate_args=True)
    # a straight-through sample (sample + probs - probs.detach()) is off one-hot by rounding
    near = np.float32([[1.0000001, 0, 0], [0, 0, 1]])
    for dist, t in ((d, tj.tensor), (td, torch.tensor)):
        with pytest.raises(ValueError, match="support"):
            dist.log_prob(t(near))
    one = np.float32([[0, 1, 0], [0, 0, 1]])
    np.testing.assert_allclose(d.log_prob(tj.tensor(one)).numpy(), td.log_prob(torch.tensor(one)).numpy(), rtol=1e-6)
    for expand in (True, False):
        np.testing.assert_array_equal(d.enumerate_support(expand).numpy(), td.enumerate_support(expand).numpy())


def test_multivariate_normal_and_independent():
    r = np.random.default_rng(5)
    a = r.standard_normal((3, 3))
    cov = a @ a.T + 3 * np.eye(3)
    loc = r.standard_normal((2, 3))
    value = r.standard_normal((2, 3))
    t = TD.MultivariateNormal(torch.tensor(loc), covariance_matrix=torch.tensor(cov))
    j = D.MultivariateNormal(tj.tensor(loc), covariance_matrix=tj.tensor(cov))
    np.testing.assert_allclose(j.log_prob(tj.tensor(value)).numpy(), t.log_prob(torch.tensor(value)).numpy(),
                               rtol=1e-10)
    np.testing.assert_allclose(j.entropy().numpy(), t.entropy().numpy(), rtol=1e-10)
    ti = TD.Independent(TD.Normal(torch.tensor(LOC), torch.tensor(SCALE)), 1)
    ji = D.Independent(D.Normal(tj.tensor(LOC), tj.tensor(SCALE)), 1)
    v = R.standard_normal(4)
    np.testing.assert_allclose(float(ji.log_prob(tj.tensor(v))), float(ti.log_prob(torch.tensor(v))), rtol=1e-10)
    assert tuple(ji.event_shape) == (4,) and tuple(ji.batch_shape) == ()
    tc = TD.Independent(TD.OneHotCategorical(logits=torch.tensor(LOGITS)), 1)
    jc = D.Independent(D.OneHotCategorical(logits=tj.tensor(LOGITS)), 1)
    np.testing.assert_array_equal(jc.mode.numpy(), tc.mode.numpy())
    np.testing.assert_allclose(float(jc.log_prob(jc.mode)), float(tc.log_prob(tc.mode)), rtol=1e-10)


KL_PAIRS = [("Normal", (LOC, SCALE), (LOC[::-1].copy(), SCALE[::-1].copy())),
            ("HalfNormal", (SCALE,), (SCALE[::-1].copy(),)), ("Gumbel", (LOC, SCALE), (LOC * 0.5, SCALE * 2)),
            ("Cauchy", (LOC, SCALE), (LOC[::-1].copy(), SCALE * 0.5)),
            ("Exponential", (POS,), (POS2,)), ("Laplace", (LOC, SCALE), (LOC * 0.5, SCALE * 2)),
            ("Uniform", (LOC, LOC + SCALE), (LOC - 1, LOC + SCALE + 1))]


@pytest.mark.parametrize("name, p, q", KL_PAIRS, ids=[k[0] for k in KL_PAIRS])
def test_kl_divergence(name, p, q):
    kt = TD.kl_divergence(_make(torch, name, p)[0], _make(torch, name, q)[0])
    kj = D.kl_divergence(_make(tj, name, p)[0], _make(tj, name, q)[0])
    np.testing.assert_allclose(kj.numpy(), kt.numpy(), rtol=1e-10)
    c1, c2 = PROBS, PROBS[::-1].copy()
    np.testing.assert_allclose(
        D.kl_divergence(D.Categorical(probs=tj.tensor(c1)), D.Categorical(probs=tj.tensor(c2))).numpy(),
        TD.kl_divergence(TD.Categorical(probs=torch.tensor(c1)), TD.Categorical(probs=torch.tensor(c2))).numpy(),
        rtol=1e-10)
    np.testing.assert_allclose(   # (one-hot categoricals: the same divergence)
        D.kl_divergence(D.OneHotCategorical(logits=tj.tensor(c1)), D.OneHotCategorical(probs=tj.tensor(c2))).numpy(),
        TD.kl_divergence(TD.OneHotCategorical(logits=torch.tensor(c1)), TD.OneHotCategorical(probs=torch.tensor(c2))).numpy(),
        rtol=1e-10)
    with pytest.raises(NotImplementedError, match="KL"):   # (a pair PyTorch has no formula for)
        D.kl_divergence(D.Normal(0.0, 1.0), D.Cauchy(0.0, 1.0))
    assert math.isfinite(float(D.kl_divergence(D.Bernoulli(probs=tj.tensor(0.3)),
                                               D.Bernoulli(probs=tj.tensor(0.6)))))


@pytest.mark.parametrize("value_shape", [(), (3,), (2, 3), (2, 1)])
def test_categorical_log_prob_broadcasts_as_torch(value_shape):
    """log_prob broadcasts the value's shape with the batch shape (3,), and its gradient
    reaches the logits, as PyTorch's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 4))
    value = rng.integers(0, 4, value_shape)
    lt = tj.tensor(logits, requires_grad=True)
    got = D.Categorical(logits=lt).log_prob(tj.tensor(value))
    got.sum().backward()
    tt = torch.tensor(logits, requires_grad=True)
    want = torch.distributions.Categorical(logits=tt).log_prob(torch.tensor(value))
    want.sum().backward()
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(lt.grad.numpy(), tt.grad.numpy(), rtol=1e-12)


def test_every_torch_submodule_path_gives_the_same_classes():
    """``from torch.distributions.normal import Normal`` after the import rewrite: each
    distribution and kl_divergence sits under the submodule path PyTorch's does."""
    import importlib
    import pkgutil
    checked = 0
    for info in pkgutil.iter_modules(TD.__path__):
        tm = importlib.import_module(f"torch.distributions.{info.name}")
        for name, obj in vars(tm).items():
            if getattr(obj, "__module__", None) == tm.__name__ and hasattr(D, name) and (
                    isinstance(obj, type) and issubclass(obj, TD.Distribution) or name == "kl_divergence"):
                mine = importlib.import_module(f"tracejit.distributions.{info.name}")
                assert getattr(mine, name) is getattr(D, name), (info.name, name)
                checked += 1
    assert checked >= 40
    from tracejit.distributions.normal import Normal
    assert Normal is D.Normal and D.normal.Normal is D.Normal


@pytest.mark.parametrize("fullgraph", [False, True])
def test_validation_inside_a_compiled_forward_checks_every_call(fullgraph):
    """A policy builds Normal(mu, std) and scores an action in its compiled forward: the
    parameters and the value are checked on every call, without ending the capture."""
    def f(mu, std, a):
        return D.Bernoulli(logits=mu).log_prob(a) + D.Normal(mu, std).log_prob(a)
    cf = tj.compile(f, fullgraph=fullgraph)
    mu, std, a = tj.tensor(R.standard_normal(4)), tj.tensor(SCALE.clip(max=1.0)), tj.tensor([0.0, 1.0, 1.0, 0.0])
    for k in (1.0, 0.5):
        np.testing.assert_allclose(cf(mu * k, std, a).numpy(), f(mu * k, std, a).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"parameter scale \(Tensor of shape \(4,\)\) .* GreaterThan"):
        cf(mu, -std, a)
    with pytest.raises(ValueError, match=r"value argument .* support"):
        cf(mu, std, a + 0.5)
    assert cf.cache_stats()["compiles"] == 1 and cf.cache_stats()["eager_fallbacks"] == 0
