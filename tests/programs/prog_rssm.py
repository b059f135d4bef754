from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.distributions as td
torch.manual_seed(0)
# A DreamerV2-style world model and actor-critic, written as the public PyTorch ports write
# it: an RSSM whose deterministic state is a GRUCell and whose stochastic state is 8
# categoricals of 8 classes (one-hot samples with straight-through gradients, probs +
# sample - probs.detach()), torch.distributions.OneHotCategorical wrapped in Independent,
# KL balancing by kl_divergence with .detach() on either side and free nats by clamp,
# observation and reward heads, then imagination rollouts of the actor in a Python loop
# and lambda-returns by a reversed loop, the actor trained by dynamics backpropagation and
# the critic on detached targets; each net under its own Adam and gradient clipping. The
# frameworks' generators differ, so the compared run samples by inverse CDF from numpy
# uniforms (the straight-through estimator unchanged); one dist.sample() call is checked
# for what it must give
STOCH, CLASSES, DETER, HIDDEN, OBS, ACT, EMBED = 8, 8, 32, 32, 12, 3, 24
B, T, H = 4, 6, 5


def sample_st(dist, u):
    """One-hot sample (dist.sample(), or by inverse CDF of uniforms u) with straight-through."""
    probs = dist.base_dist.probs if isinstance(dist, td.Independent) else dist.probs
    if u is None:
        sample = dist.sample()
    else:
        idx = (probs.cumsum(-1) < u.unsqueeze(-1)).sum(-1).clamp(max=probs.shape[-1] - 1)
        sample = F.one_hot(idx, probs.shape[-1]).to(probs.dtype)
    return sample + probs - probs.detach()


class RSSM(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc_input = nn.Sequential(nn.Linear(STOCH * CLASSES + ACT, HIDDEN), nn.ELU())
        self.cell = nn.GRUCell(HIDDEN, DETER)
        self.fc_prior = nn.Sequential(nn.Linear(DETER, HIDDEN), nn.ELU(), nn.Linear(HIDDEN, STOCH * CLASSES))
        self.fc_post = nn.Sequential(nn.Linear(DETER + EMBED, HIDDEN), nn.ELU(), nn.Linear(HIDDEN, STOCH * CLASSES))

    def get_dist(self, logits):
        logits = logits.reshape(*logits.shape[:-1], STOCH, CLASSES)
        return td.Independent(td.OneHotCategorical(logits=logits), 1)

    def img_step(self, stoch, deter, action, u):
        x = self.fc_input(torch.cat([stoch, action], -1))
        deter = self.cell(x, deter)
        logits = self.fc_prior(deter)
        stoch = sample_st(self.get_dist(logits), u).flatten(-2)
        return stoch, deter, logits

    def forward(self, stoch, deter, action, embed, u_prior, u_post):   # obs_step
        stoch_prior, deter, prior_logits = self.img_step(stoch, deter, action, u_prior)
        post_logits = self.fc_post(torch.cat([deter, embed], -1))
        stoch = sample_st(self.get_dist(post_logits), u_post).flatten(-2)
        return stoch, deter, prior_logits, post_logits


def mlp(i, o):
    return nn.Sequential(nn.Linear(i, HIDDEN), nn.ELU(), nn.Linear(HIDDEN, o))


rssm = RSSM()
encoder, decoder = mlp(OBS, EMBED), mlp(STOCH * CLASSES + DETER, OBS)
reward_head, actor, critic = mlp(STOCH * CLASSES + DETER, 1), mlp(STOCH * CLASSES + DETER, ACT), mlp(STOCH * CLASSES + DETER, 1)
sync(rssm, encoder, decoder, reward_head, actor, critic)
obs_step = comp(rssm)
world_params = [*rssm.parameters(), *encoder.parameters(), *decoder.parameters(), *reward_head.parameters()]
model_opt = torch.optim.Adam(world_params, lr=6e-4, eps=1e-5)
actor_opt = torch.optim.Adam(actor.parameters(), lr=8e-5, eps=1e-5)
critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-4, eps=1e-5)
kl_balance, free_nats, discount, lambda_ = 0.8, 0.05, 0.99, 0.95
rng = np.random.default_rng(0)
U = lambda *s: torch.from_numpy(rng.random((*s, STOCH)).astype(np.float32))


def kl_loss(prior_logits, post_logits):
    get = rssm.get_dist
    kl_lhs = td.kl_divergence(get(post_logits.detach()), get(prior_logits)).mean()
    kl_rhs = td.kl_divergence(get(post_logits), get(prior_logits.detach())).mean()
    kl_lhs = torch.max(kl_lhs, kl_lhs.new_full(kl_lhs.size(), free_nats))
    kl_rhs = torch.clamp(kl_rhs, min=free_nats)
    return kl_balance * kl_lhs + (1 - kl_balance) * kl_rhs


def lambda_return(reward, value, bootstrap, pcont):
    next_values = torch.cat([value[1:], bootstrap[None]], 0)
    inputs = reward + pcont * next_values * (1 - lambda_)
    outputs, last = [], bootstrap
    for t in reversed(range(reward.shape[0])):
        last = inputs[t] + pcont[t] * lambda_ * last
        outputs.append(last)
    return torch.stack(list(reversed(outputs)), 0)


LOSSES = []
for it in range(3):
    obs = torch.from_numpy(rng.standard_normal((T, B, OBS)).astype(np.float32))
    actions = F.one_hot(torch.from_numpy(rng.integers(0, ACT, (T, B))), ACT).float()
    rewards = obs[..., :2].sum(-1, keepdim=True).tanh()
    embed = encoder(obs)
    stoch, deter = torch.zeros(B, STOCH * CLASSES), torch.zeros(B, DETER)
    priors, posts, feats = [], [], []
    for t in range(T):
        stoch, deter, prior_logits, post_logits = obs_step(stoch, deter, actions[t], embed[t], U(B), U(B))
        priors.append(prior_logits); posts.append(post_logits); feats.append(torch.cat([stoch, deter], -1))
    feat = torch.stack(feats, 0)
    obs_dist = td.Independent(td.Normal(decoder(feat), 1.0), 1)
    rew_dist = td.Independent(td.Normal(reward_head(feat), 1.0), 1)
    kl = kl_loss(torch.stack(priors, 0), torch.stack(posts, 0))
    model_loss = -obs_dist.log_prob(obs).mean() - rew_dist.log_prob(rewards).mean() + kl
    model_opt.zero_grad()
    model_loss.backward()
    nn.utils.clip_grad_norm_(world_params, 100.0)
    model_opt.step()
    # imagination from every posterior state, the world model frozen
    for p in world_params:
        p.requires_grad_(False)
    s, d = stoch.detach(), deter.detach()
    imag_feats, ents = [torch.cat([s, d], -1)], []
    for h in range(H):
        logits = actor(imag_feats[-1].detach())
        a_dist = td.OneHotCategorical(logits=logits)
        u = torch.from_numpy(rng.random(B).astype(np.float32))
        action = sample_st(a_dist, u)
        ents.append(a_dist.entropy())
        s, d, _ = rssm.img_step(s, d, action, U(B))
        imag_feats.append(torch.cat([s, d], -1))
    imag_feat = torch.stack(imag_feats[1:], 0)
    imag_reward = reward_head(imag_feat)
    value = critic(imag_feat)
    pcont = discount * torch.ones_like(imag_reward)
    returns = lambda_return(imag_reward[:-1], value[:-1], value[-1], pcont[:-1])
    actor_loss = -returns.mean() - 1e-3 * torch.stack(ents[:-1], 0).mean()
    actor_opt.zero_grad()
    actor_loss.backward()
    nn.utils.clip_grad_norm_(actor.parameters(), 100.0)
    actor_opt.step()
    value_pred = critic(imag_feat[:-1].detach())
    critic_loss = F.mse_loss(value_pred, returns.detach())
    critic_opt.zero_grad()
    critic_loss.backward()
    critic_opt.step()
    for p in world_params:
        p.requires_grad_(True)
    LOSSES += [model_loss.item(), kl.item(), actor_loss.item(), critic_loss.item()]
with torch.no_grad():
    d = rssm.get_dist(torch.from_numpy(rng.standard_normal((B, STOCH * CLASSES)).astype(np.float32)))
    LOSSES += [d.entropy().sum().item(), d.log_prob(d.mode).sum().item(),
               (sample_st(d, U(B)) * d.mean).sum().item()]
    smp = d.sample()                        # the generator's own draws: one-hot rows
    LOSSES += [smp.sum().item(), float(((smp == 0) | (smp == 1)).all().item())]
