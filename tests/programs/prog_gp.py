from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
# exact Gaussian-process regression, as a GPyTorch-free tutorial writes it: an RBF kernel
# with ARD lengthscales, positive hyperparameters through softplus, the negative log
# marginal likelihood by Cholesky, Adam on it, then the predictive mean and variance
class ExactGP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.zeros(dim))
        self.raw_outputscale = nn.Parameter(torch.tensor(0.0))
        self.raw_noise = nn.Parameter(torch.tensor(-2.0))
        self.mean_const = nn.Parameter(torch.tensor(0.0))
    def kernel(self, a, b):
        ls = F.softplus(self.raw_lengthscale)
        d2 = torch.cdist(a / ls, b / ls).pow(2)
        return F.softplus(self.raw_outputscale) * torch.exp(-0.5 * d2)
    def forward(self, X, y):
        n = X.shape[0]
        K = self.kernel(X, X) + (F.softplus(self.raw_noise) + 1e-6) * torch.eye(n)
        L = torch.linalg.cholesky(K)
        r = (y - self.mean_const).unsqueeze(-1)
        alpha = torch.cholesky_solve(r, L)
        nll = 0.5 * (r * alpha).sum() + torch.log(torch.diagonal(L)).sum() + 0.5 * n * math.log(2 * math.pi)
        return nll / n
    @torch.no_grad()
    def predict(self, X, y, Xs):
        K = self.kernel(X, X) + (F.softplus(self.raw_noise) + 1e-6) * torch.eye(X.shape[0])
        L = torch.linalg.cholesky(K)
        Ks = self.kernel(X, Xs)
        alpha = torch.cholesky_solve((y - self.mean_const).unsqueeze(-1), L)
        mean = self.mean_const + (Ks.T @ alpha).squeeze(-1)
        v = torch.linalg.solve_triangular(L, Ks, upper=False)
        var = F.softplus(self.raw_outputscale) - (v * v).sum(0)
        return mean, var
r = np.random.default_rng(0)
X = torch.from_numpy(r.uniform(-3, 3, (48, 2)))
y = torch.sin(X[:, 0]) * torch.cos(0.5 * X[:, 1]) + 0.1 * torch.from_numpy(r.standard_normal(48))
gp = ExactGP(2); sync(gp)
mll = comp(gp, fullgraph=True)
opt = torch.optim.Adam(gp.parameters(), lr=0.1)
LOSSES = []
for it in range(6):
    opt.zero_grad()
    loss = mll(X, y)
    loss.backward()
    opt.step()
    LOSSES.append(loss.item())
Xs = torch.from_numpy(r.uniform(-3, 3, (10, 2)))
mean, var = gp.predict(X, y, Xs)
LOSSES += [mean.sum().item(), var.sum().item(), torch.linalg.slogdet(gp.kernel(Xs, Xs) + 0.1 * torch.eye(10))[1].item()]
# a Cholesky-parameterized MVN's log-likelihood, as a Bayesian tutorial samples it
mvn = torch.distributions.MultivariateNormal(mean, covariance_matrix=gp.kernel(Xs, Xs).detach() + 0.1 * torch.eye(10))
LOSSES += [mvn.log_prob(torch.zeros(10)).item(), mvn.entropy().item()]
