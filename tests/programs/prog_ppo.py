from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn
from torch.distributions import Normal, Categorical
from torch.utils.data import BatchSampler, SequentialSampler
torch.manual_seed(0)
class AC(nn.Module):
    def __init__(s):
        super().__init__()
        s.actor = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 2))
        s.critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
        s.log_std = nn.Parameter(torch.zeros(1, 2))
        for m in s.modules():
            if isinstance(m, nn.Linear): nn.init.orthogonal_(m.weight, gain=np.sqrt(2)); nn.init.constant_(m.bias, 0.0)
    def forward(s, x):
        mu = s.actor(x); std = s.log_std.exp().expand_as(mu)
        return Normal(mu, std), s.critic(x)
ac = AC(); sync(ac)
opt = torch.optim.Adam(ac.parameters(), lr=3e-4, eps=1e-5)
r = np.random.default_rng(0)
N = 64
obs = torch.from_numpy(r.standard_normal((N, 6)).astype(np.float32))
with torch.no_grad():
    dist, values = ac(obs)
    actions = torch.from_numpy(r.standard_normal((N, 2)).astype(np.float32))
    old_lp = dist.log_prob(actions).sum(-1)
rewards = torch.from_numpy(r.standard_normal(N).astype(np.float32)); dones = torch.from_numpy((r.random(N) < 0.05).astype(np.float32))
values = values.squeeze(-1); adv = torch.zeros_like(rewards); last = 0
for t in reversed(range(N)):
    nv = values[t + 1] if t + 1 < N else 0.0
    delta = rewards[t] + 0.99 * nv * (1 - dones[t]) - values[t]
    last = delta + 0.99 * 0.95 * (1 - dones[t]) * last; adv[t] = last
ret = adv + values
adv = (adv - adv.mean()) / (adv.std() + 1e-8)
LOSSES = []
for epoch in range(2):
    for idx in BatchSampler(SequentialSampler(range(N)), 16, drop_last=False):
        idx = torch.tensor(idx)
        d, v = ac(obs[idx]); lp = d.log_prob(actions[idx]).sum(-1)
        ratio = torch.exp(lp - old_lp[idx])
        s1 = ratio * adv[idx]; s2 = torch.clamp(ratio, 1.0 - 0.2, 1.0 + 0.2) * adv[idx]
        pl = -torch.min(s1, s2).mean(); vl = 0.5 * (ret[idx] - v.squeeze(-1)).pow(2).mean(); ent = d.entropy().sum(-1).mean()
        loss = pl + 0.5 * vl - 0.01 * ent
        opt.zero_grad(); loss.backward(); nn.utils.clip_grad_norm_(ac.parameters(), 0.5); opt.step()
        LOSSES.append(loss.item())
logits = torch.from_numpy(r.standard_normal((4, 3)).astype(np.float32))
c = Categorical(logits=logits); LOSSES.append(c.entropy().sum().item()); LOSSES.append(c.log_prob(torch.tensor([0, 1, 2, 1])).sum().item())
