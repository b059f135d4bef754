from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn
from torch import distributions as D
torch.manual_seed(0)
class Coupling(nn.Module):
    def __init__(s, dim, mask):
        super().__init__(); s.register_buffer("mask", mask)
        s.s = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, dim)); s.t = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, dim))
    def forward(s, x):
        xm = x * s.mask; sv = s.s(xm) * (1 - s.mask); tv = s.t(xm) * (1 - s.mask)
        return xm + (1 - s.mask) * (x * torch.exp(sv) + tv), sv.sum(dim=1)
class RealNVP(nn.Module):
    def __init__(s, dim=4):
        super().__init__()
        masks = [torch.tensor([1., 0., 1., 0.]), torch.tensor([0., 1., 0., 1.])] * 2
        s.layers = nn.ModuleList([Coupling(dim, m) for m in masks])
        s.prior = D.MultivariateNormal(torch.zeros(dim), torch.eye(dim))
    def forward(s, x):
        ld = torch.zeros(x.shape[0])
        for l in s.layers: x, d = l(x); ld = ld + d
        return s.prior.log_prob(x) + ld
m = RealNVP(); sync(m)
opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3)
r = np.random.default_rng(0); LOSSES = []
for i in range(4):
    x = torch.from_numpy(r.standard_normal((64, 4)).astype(np.float32) * np.array([1, 2, 0.5, 1], np.float32))
    loss = -m(x).mean(); opt.zero_grad(); loss.backward(); opt.step(); LOSSES.append(loss.item())
# mixture density head
pi_logits = torch.from_numpy(r.standard_normal((8, 3)).astype(np.float32)); mu = torch.from_numpy(r.standard_normal((8, 3)).astype(np.float32))
sig = torch.from_numpy(r.random((8, 3)).astype(np.float32) + 0.5); y = torch.from_numpy(r.standard_normal((8, 1)).astype(np.float32))
mix = D.MixtureSameFamily(D.Categorical(logits=pi_logits), D.Normal(mu, sig))
LOSSES.append(-mix.log_prob(y.squeeze(1)).mean().item())
lp = torch.logsumexp(torch.log_softmax(pi_logits, -1) + D.Normal(mu, sig).log_prob(y), dim=-1)
LOSSES.append(-lp.mean().item())
LOSSES.append(D.kl_divergence(D.Normal(mu, sig), D.Normal(torch.zeros(8, 3), torch.ones(8, 3))).sum().item())
