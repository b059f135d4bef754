from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.distributions as dist
torch.manual_seed(0)

# A categorical VAE (Jang et al. 2017): the encoder's logits give N categorical latents,
# sampled by the straight-through Gumbel-softmax with an annealed temperature; the KL to a
# uniform prior goes through torch.distributions; the decoder's Bernoulli likelihood uses
# logits. The Gumbel noise is drawn outside (numpy), as the runs must share it.
N, K = 6, 5

class CatVAE(nn.Module):
    def __init__(self, d=36):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, 64), nn.ELU(), nn.Linear(64, N * K))
        self.dec = nn.Sequential(nn.Linear(N * K, 64), nn.ELU(), nn.Linear(64, d))
    def forward(self, x, gumbels, tau: float, hard: bool = True):
        logits = self.enc(x).view(-1, N, K)
        y_soft = ((logits.log_softmax(-1) + gumbels) / tau).softmax(-1)
        if hard:
            index = y_soft.max(-1, keepdim=True)[1]
            y_hard = torch.zeros_like(logits, memory_format=torch.legacy_contiguous_format).scatter_(-1, index, 1.0)
            z = y_hard - y_soft.detach() + y_soft
        else:
            z = y_soft
        return self.dec(z.view(-1, N * K)), logits

model = CatVAE(); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
net = comp(model)
rng = np.random.default_rng(0)
prior = dist.OneHotCategorical(probs=torch.full((N, K), 1.0 / K))
LOSSES = []
tau = 1.0
for step in range(6):
    x = torch.from_numpy((rng.random((16, 36)) < 0.3).astype(np.float32))
    u = rng.random((16, N, K)).clip(1e-10, 1 - 1e-10)
    g = torch.from_numpy((-np.log(-np.log(u))).astype(np.float32))
    recon_logits, logits = net(x, g, tau)
    q = dist.OneHotCategorical(logits=logits)
    kl = dist.kl_divergence(q, prior).sum(-1).mean()
    nll = dist.Bernoulli(logits=recon_logits).log_prob(x).sum(-1).mean().neg()
    loss = nll + kl
    opt.zero_grad(); loss.backward(); opt.step()
    tau = max(0.5, tau * np.exp(-0.1 * step))
    LOSSES += [loss.item(), kl.item(), q.entropy().sum(-1).mean().item()]
model.eval()
with torch.no_grad():
    recon_logits, logits = net(x, g, tau, hard=False)
    LOSSES += [F.binary_cross_entropy_with_logits(recon_logits, x).item(),
               dist.Categorical(logits=logits).log_prob(logits.argmax(-1)).sum().item()]
