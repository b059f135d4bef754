from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.distributions as D
torch.manual_seed(0)
class MDN(nn.Module):
    def __init__(self, dim_in=1, dim_out=2, n_components=5, hidden=32):
        super().__init__()
        self.n_components, self.dim_out = n_components, dim_out
        self.base = nn.Sequential(nn.Linear(dim_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_components)
        self.mu = nn.Linear(hidden, n_components * dim_out)
        self.sigma = nn.Linear(hidden, n_components * dim_out)
    def forward(self, x):
        h = self.base(x)
        logits = self.pi(h)
        mu = self.mu(h).view(-1, self.n_components, self.dim_out)
        sigma = F.softplus(self.sigma(h)).view(-1, self.n_components, self.dim_out) + 1e-3
        return logits, mu, sigma
def mixture(logits, mu, sigma):
    mix = D.Categorical(logits=logits)
    comp_ = D.Independent(D.Normal(mu, sigma), 1)
    return D.MixtureSameFamily(mix, comp_)
model = MDN(); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
r = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    x = r.uniform(-1, 1, (128, 1)).astype(np.float32)
    y = np.concatenate([np.sin(3 * x) + 0.1 * r.standard_normal((128, 1)), np.cos(2 * x) * np.sign(r.standard_normal((128, 1)))], 1).astype(np.float32)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    gmm = mixture(*net(x))
    loss = -gmm.log_prob(y).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
with torch.no_grad():
    logits, mu, sigma = model(torch.linspace(-1, 1, 16).unsqueeze(1))
    gmm = mixture(logits, mu, sigma)
    torch.manual_seed(1)
    s = gmm.sample((100,))
    LOSSES += [float(s.shape == (100, 16, 2)), float(torch.isfinite(s).all()), gmm.mean.sum().item(), gmm.variance.sum().item()]
    LOSSES.append(gmm.component_distribution.log_prob(y[:16, None, :]).sum().item())
    LOSSES.append(gmm.mixture_distribution.entropy().mean().item())
    LOSSES.append(gmm.log_prob(torch.zeros(3, 16, 2)).sum().item())
