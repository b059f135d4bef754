from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, itertools, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.distributions.normal import Normal
torch.manual_seed(0)
# Soft Actor-Critic as Spinning Up's sac/core.py writes it: a tanh-squashed Gaussian actor
# (rsample, the log-prob correction), twin Q networks and their Polyak-averaged targets
# (mul_ / add_ on p.data under no_grad), the entropy temperature learned as log_alpha
def mlp(sizes, activation, output_activation=nn.Identity):
    layers = []
    for j in range(len(sizes) - 1):
        act = activation if j < len(sizes) - 2 else output_activation
        layers += [nn.Linear(sizes[j], sizes[j + 1]), act()]
    return nn.Sequential(*layers)
LOG_STD_MAX, LOG_STD_MIN = 2, -20
class SquashedGaussianMLPActor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden_sizes, activation, act_limit):
        super().__init__()
        self.net = mlp([obs_dim] + list(hidden_sizes), activation, activation)
        self.mu_layer = nn.Linear(hidden_sizes[-1], act_dim)
        self.log_std_layer = nn.Linear(hidden_sizes[-1], act_dim)
        self.act_limit = act_limit
    def forward(self, obs, eps, deterministic=False, with_logprob=True):
        net_out = self.net(obs)
        mu = self.mu_layer(net_out)
        log_std = self.log_std_layer(net_out)
        log_std = torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
        std = torch.exp(log_std)
        pi_distribution = Normal(mu, std)
        # rsample's noise drawn with numpy and passed in: mu + std * eps, as rsample computes
        pi_action = mu if deterministic else mu + std * eps
        if with_logprob:
            logp_pi = pi_distribution.log_prob(pi_action).sum(axis=-1)
            logp_pi -= (2 * (np.log(2) - pi_action - F.softplus(-2 * pi_action))).sum(axis=1)
        else:
            logp_pi = None
        pi_action = torch.tanh(pi_action)
        pi_action = self.act_limit * pi_action
        return pi_action, logp_pi
class MLPQFunction(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
        super().__init__()
        self.q = mlp([obs_dim + act_dim] + list(hidden_sizes) + [1], activation)
    def forward(self, obs, act):
        q = self.q(torch.cat([obs, act], dim=-1))
        return torch.squeeze(q, -1)  # Critical to ensure q has right shape.
class MLPActorCritic(nn.Module):
    def __init__(self, obs_dim=5, act_dim=2, hidden_sizes=(32, 32), activation=nn.ReLU):
        super().__init__()
        self.pi = SquashedGaussianMLPActor(obs_dim, act_dim, hidden_sizes, activation, 1.0)
        self.q1 = MLPQFunction(obs_dim, act_dim, hidden_sizes, activation)
        self.q2 = MLPQFunction(obs_dim, act_dim, hidden_sizes, activation)
ac = MLPActorCritic(); sync(ac)
ac_targ = copy.deepcopy(ac)
for p in ac_targ.parameters():
    p.requires_grad = False
q_params = itertools.chain(ac.q1.parameters(), ac.q2.parameters())
pi, q1, q2, q1_targ, q2_targ = comp(ac.pi), comp(ac.q1), comp(ac.q2), comp(ac_targ.q1), comp(ac_targ.q2)
gamma, polyak, target_entropy = 0.99, 0.995, -2.0
log_alpha = torch.zeros(1, requires_grad=True)
pi_optimizer = torch.optim.Adam(ac.pi.parameters(), lr=1e-3)
q_optimizer = torch.optim.Adam(q_params, lr=1e-3)
alpha_optimizer = torch.optim.Adam([log_alpha], lr=1e-3)
def compute_loss_q(data, alpha):
    o, a, r, o2, d, eps2 = data['obs'], data['act'], data['rew'], data['obs2'], data['done'], data['eps2']
    q1v, q2v = q1(o, a), q2(o, a)
    with torch.no_grad():
        a2, logp_a2 = pi(o2, eps2)
        q_pi_targ = torch.min(q1_targ(o2, a2), q2_targ(o2, a2))
        backup = r + gamma * (1 - d) * (q_pi_targ - alpha * logp_a2)
    return ((q1v - backup) ** 2).mean() + ((q2v - backup) ** 2).mean()
def compute_loss_pi(data, alpha):
    o = data['obs']
    pi_a, logp_pi = pi(o, data['eps'])
    q_pi = torch.min(q1(o, pi_a), q2(o, pi_a))
    return (alpha * logp_pi - q_pi).mean(), logp_pi
rng = np.random.default_rng(0)
N, B = 200, 32   # a replay buffer of numpy arrays, as Spinning Up's ReplayBuffer keeps them
buf = {'obs': rng.standard_normal((N, 5)), 'obs2': rng.standard_normal((N, 5)), 'act': rng.uniform(-1, 1, (N, 2)),
       'rew': rng.standard_normal(N), 'done': (rng.random(N) < 0.1).astype(np.float64)}
LOSSES = []
for t in range(6):
    idxs = rng.integers(0, N, size=B)
    data = {k: torch.as_tensor(v[idxs], dtype=torch.float32) for k, v in buf.items()}
    data['eps'] = torch.as_tensor(rng.standard_normal((B, 2)), dtype=torch.float32)
    data['eps2'] = torch.as_tensor(rng.standard_normal((B, 2)), dtype=torch.float32)
    alpha = log_alpha.exp().detach()
    q_optimizer.zero_grad()
    loss_q = compute_loss_q(data, alpha)
    loss_q.backward()
    q_optimizer.step()
    for p in itertools.chain(ac.q1.parameters(), ac.q2.parameters()):
        p.requires_grad = False
    pi_optimizer.zero_grad()
    loss_pi, logp_pi = compute_loss_pi(data, alpha)
    loss_pi.backward()
    pi_optimizer.step()
    for p in itertools.chain(ac.q1.parameters(), ac.q2.parameters()):
        p.requires_grad = True
    alpha_loss = -(log_alpha * (logp_pi.detach() + target_entropy)).mean()
    alpha_optimizer.zero_grad(); alpha_loss.backward(); alpha_optimizer.step()
    with torch.no_grad():
        for p, p_targ in zip(ac.parameters(), ac_targ.parameters()):
            p_targ.data.mul_(polyak)
            p_targ.data.add_((1 - polyak) * p.data)
    LOSSES += [loss_q.item(), loss_pi.item(), alpha_loss.item()]
with torch.no_grad():
    a, _ = pi(torch.as_tensor(buf['obs'][:4], dtype=torch.float32), None, deterministic=True, with_logprob=False)
LOSSES += [a.sum().item(), log_alpha.item(), sum(p.sum() for p in ac_targ.parameters()).item()]
