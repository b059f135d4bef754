"""LowRankMultivariateNormal, Wishart and LKJCholesky against PyTorch: log_prob, entropy,
moments and the matrices, their gradients, KL pairs, shapes under expand, sample
statistics and validation errors."""
import warnings

import numpy as np
import pytest

import tracejit as tj
import tracejit.distributions as D

torch = pytest.importorskip("torch", reason="compares with PyTorch")

R = np.random.default_rng(1)
N, M = 3, 2
LOC, W, DIAG = R.normal(size=(2, N)), R.normal(size=(2, N, M)), R.uniform(0.5, 2, (N,))
VAL = R.normal(size=(2, N))
_A = R.normal(size=(2, N, N))
COV = _A @ _A.transpose(0, 2, 1) + N * np.eye(N)
_B = R.normal(size=(N, N))
X = _B @ _B.T + np.eye(N)
SCALE_TRIL = np.linalg.cholesky(COV[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lowrank_mvn_matches_torch(dtype):
    def run(lib):
        dt = getattr(lib, dtype)
        ts = [lib.tensor(x, dtype=dt, requires_grad=True) for x in (LOC, W, DIAG)]
        d = lib.distributions.LowRankMultivariateNormal(*ts)
        q = lib.distributions.LowRankMultivariateNormal(ts[0] * 0.5, ts[1] * 0.3 + 0.1, ts[2] + 1)
        mvn = lib.distributions.MultivariateNormal(lib.tensor(LOC[0], dtype=dt),
                                                   scale_tril=lib.tensor(SCALE_TRIL, dtype=dt))
        kl = lib.distributions.kl_divergence
        r = dict(lp=d.log_prob(lib.tensor(VAL, dtype=dt)), ent=d.entropy(), var=d.variance, st=d.scale_tril,
                 cov=d.covariance_matrix, prec=d.precision_matrix, kl1=kl(d, q), kl2=kl(mvn, d), kl3=kl(d, mvn))
        grads = lib.autograd.grad(sum(v.sum() for v in r.values()), ts)
        return ({k: v.detach().numpy() for k, v in r.items()}, [g.numpy() for g in grads],
                tuple(d.batch_shape), tuple(d.event_shape))
    want, got = run(torch), run(tj)
    rtol = 1e-9 if dtype == "float64" else 1e-4
    for k in want[0]:
        assert got[0][k].dtype == want[0][k].dtype
        np.testing.assert_allclose(got[0][k], want[0][k], rtol=rtol, atol=rtol, err_msg=k)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=rtol * 10, atol=rtol * 10)
    assert got[2:] == want[2:] == ((2,), (N,))


def test_lowrank_mvn_samples_and_errors():
    tj.manual_seed(0)
    d = D.LowRankMultivariateNormal(tj.tensor(LOC[0]), tj.tensor(W[0]), tj.tensor(DIAG))
    x = d.rsample((20000,)).numpy()
    np.testing.assert_allclose(np.cov(x.T), d.covariance_matrix.numpy(), atol=0.15)
    e = d.expand((4, 2))
    assert tuple(e.rsample((5,)).shape) == (5, 4, 2, N) and tuple(e.cov_factor.shape) == (4, 2, N, M)
    with pytest.raises(ValueError, match="cov_factor"):
        D.LowRankMultivariateNormal(tj.tensor(LOC[0]), tj.tensor(W[0].T), tj.tensor(DIAG))
    with pytest.raises(ValueError, match="cov_diag"):
        D.LowRankMultivariateNormal(tj.tensor(LOC[0]), tj.tensor(W[0]), tj.tensor(-DIAG))
    with pytest.raises(ValueError, match="loc"):
        D.LowRankMultivariateNormal(tj.tensor(1.0), tj.tensor(W[0]), tj.tensor(DIAG))


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_wishart_matches_torch(param):
    def run(lib):
        df = lib.tensor([4.5, 7.0], dtype=lib.float64, requires_grad=True)
        c = lib.tensor(COV, requires_grad=True)
        given = lib.linalg.cholesky(c) if param == "scale_tril" else c
        d = lib.distributions.Wishart(df, **{param: given})
        # KL of unbatched ones: PyTorch's Bregman KL sums df's term over the batch
        d0 = lib.distributions.Wishart(df[0], **{param: given[0]})
        q0 = lib.distributions.Wishart(df[0] + 1, covariance_matrix=c[0] * 2)
        r = dict(lp=d.log_prob(lib.tensor(X)), ent=d.entropy(), mean=d.mean, var=d.variance, mode=d.mode,
                 prec=d.precision_matrix, cov=d.covariance_matrix, kl=lib.distributions.kl_divergence(d0, q0))
        # (PyTorch's Bregman KL is cut off from p's parameters; tracejit's is not: see below)
        grads = lib.autograd.grad(sum(lib.nan_to_num(v).sum() for k, v in r.items() if k != "kl"), [df, c])
        return ({k: v.detach().numpy() for k, v in r.items()}, [g.numpy() for g in grads],
                tuple(d.batch_shape), tuple(d.event_shape))
    want, got = run(torch), run(tj)
    for k in want[0]:
        np.testing.assert_allclose(got[0][k], want[0][k], rtol=1e-9, atol=1e-9, err_msg=k)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8)
    assert got[2:] == want[2:] == ((2,), (N, N))


def test_wishart_kl_gradient_reaches_both_distributions():
    def kl(df_p, df_q):
        p = D.Wishart(df_p, covariance_matrix=tj.tensor(COV))
        return D.kl_divergence(p, D.Wishart(df_q, covariance_matrix=tj.tensor(COV) * 2))
    dp = tj.tensor([4.5, 7.0], dtype=tj.float64, requires_grad=True)
    dq = tj.tensor([5.5, 6.0], dtype=tj.float64, requires_grad=True)
    gp, gq = tj.autograd.grad(kl(dp, dq).sum(), [dp, dq])
    h = 1e-6
    for g, bump in ((gp, lambda e: (dp.detach() + e, dq.detach())), (gq, lambda e: (dp.detach(), dq.detach() + e))):
        fd = (kl(*bump(h)) - kl(*bump(-h))).detach().numpy() / (2 * h)
        np.testing.assert_allclose(g.numpy(), fd, rtol=1e-5)
    whole = kl(dp, dq).detach().numpy()       # each batch member's KL is its own
    for i in range(2):
        p = D.Wishart(dp[i].detach(), covariance_matrix=tj.tensor(COV[i]))
        q = D.Wishart(dq[i].detach(), covariance_matrix=tj.tensor(COV[i]) * 2)
        np.testing.assert_allclose(whole[i], D.kl_divergence(p, q).detach().numpy(), rtol=1e-10)


def test_wishart_samples_gradients_and_errors():
    tj.manual_seed(0)
    df = tj.tensor([4.5, 7.0], dtype=tj.float64, requires_grad=True)
    d = D.Wishart(df, covariance_matrix=tj.tensor(COV))
    s = d.rsample((4000,))
    assert tuple(s.shape) == (4000, 2, N, N) and bool(D.constraints.positive_definite.check(s).all())
    mean = d.mean.detach().numpy()
    assert np.abs(s.detach().numpy().mean(0) - mean).max() < 0.05 * np.abs(mean).max()
    g = tj.autograd.grad(s[..., 0, 0].mean(0).sum(), df)[0].numpy()     # d E[S_00] / d df = V_00
    np.testing.assert_allclose(g, COV[:, 0, 0], rtol=0.05)
    assert tuple(d.expand((3, 2)).rsample().shape) == (3, 2, N, N)
    with pytest.raises(ValueError, match="df"):
        D.Wishart(tj.tensor(1.5), covariance_matrix=tj.tensor(COV))
    with pytest.raises(ValueError, match="exactly one"):
        D.Wishart(tj.tensor(5.0))
    with pytest.raises(ValueError, match="covariance_matrix"):
        D.Wishart(tj.tensor(5.0), covariance_matrix=tj.tensor(-COV))
    with pytest.raises(ValueError, match="scale_tril"):
        D.Wishart(tj.tensor(5.0), scale_tril=tj.tensor(COV))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        D.Wishart(tj.tensor(2.5), covariance_matrix=tj.tensor(COV[0]))
    assert any("Low df" in str(x.message) for x in w)


@pytest.mark.parametrize("conc", [0.5, 2.0])
def test_lkj_cholesky_matches_torch(conc):
    c = np.array([conc, conc + 1])
    torch.manual_seed(0)
    value = torch.distributions.LKJCholesky(4, torch.tensor(c)).sample()
    out = []
    for lib in (torch, tj):
        ct = lib.tensor(c, requires_grad=True)
        lp = lib.distributions.LKJCholesky(4, ct).log_prob(lib.tensor(value.numpy()))
        out.append((lp.detach().numpy(), lib.autograd.grad(lp.sum(), [ct])[0].numpy()))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-10)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-9)


def test_lkj_cholesky_samples_and_errors():
    tj.manual_seed(0)
    d = D.LKJCholesky(3, tj.tensor([0.5, 3.0], dtype=tj.float64))
    x = d.sample((8000,))
    assert tuple(x.shape) == (8000, 2, 3, 3) and bool(D.constraints.corr_cholesky.check(x).all())
    c = x.numpy() @ x.numpy().transpose(0, 1, 3, 2)
    # an LKJ(eta) correlation of dim d has var 1 / (2 eta + d - 1) off the diagonal
    np.testing.assert_allclose(c[..., 0, 1].var(0), [1 / 3, 1 / 8], rtol=0.08)
    assert tuple(d.expand((4, 2)).sample().shape) == (4, 2, 3, 3)
    with pytest.raises(ValueError, match="dim"):
        D.LKJCholesky(1)
    with pytest.raises(ValueError, match="concentration"):
        D.LKJCholesky(3, tj.tensor(-1.0))
    with pytest.raises(ValueError, match="support"):
        D.LKJCholesky(3).log_prob(tj.eye(3) * 2)
