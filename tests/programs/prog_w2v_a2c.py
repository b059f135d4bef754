from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.distributions import Categorical
# Two small classics. word2vec skip-gram with negative sampling (the PyTorch tutorials' and
# Adoni/word2vec_pytorch style): nn.Embedding(sparse=True) for the centre and context words,
# a unigram^0.75 noise table, torch.multinomial(replacement=True) for negatives, F.logsigmoid
# of bmm scores, optim.SparseAdam, then SGD on the sparse gradients. A2C with GAE
# (pytorch-a2c-ppo-acktr style) on a tiny built-in corridor environment: a shared trunk
# with actor and critic heads, Categorical actions, GAE by a reversed Python loop, advantage
# normalization, an entropy bonus, gradient clipping, RMSprop
torch.manual_seed(0)
r = np.random.default_rng(0)

# ---- word2vec ----
vocab_size, emb_dim, window, n_neg = 40, 16, 2, 5
# a corpus with structure: words in "topics" of 8 co-occur
corpus = np.concatenate([(r.integers(0, 8, 30) + 8 * r.integers(0, 5)) for _ in range(40)])
counts = np.bincount(corpus, minlength=vocab_size).astype(np.float64)
pow_freq = counts ** 0.75
noise_dist = torch.tensor(pow_freq / pow_freq.sum(), dtype=torch.float)


class SkipGramModel(nn.Module):
    def __init__(self, emb_size, emb_dimension):
        super(SkipGramModel, self).__init__()
        self.u_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=True)
        self.v_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=True)
        initrange = 1.0 / emb_dimension
        nn.init.uniform_(self.u_embeddings.weight.data, -initrange, initrange)
        nn.init.constant_(self.v_embeddings.weight.data, 0)

    def forward(self, pos_u, pos_v, neg_v):
        emb_u = self.u_embeddings(pos_u)
        emb_v = self.v_embeddings(pos_v)
        emb_neg_v = self.v_embeddings(neg_v)
        score = torch.sum(torch.mul(emb_u, emb_v), dim=1)
        score = torch.clamp(score, max=10, min=-10)
        score = -F.logsigmoid(score)
        neg_score = torch.bmm(emb_neg_v, emb_u.unsqueeze(2)).squeeze()
        neg_score = torch.clamp(neg_score, max=10, min=-10)
        neg_score = -torch.sum(F.logsigmoid(-neg_score), dim=1)
        return torch.mean(score + neg_score)


pairs = np.array([(corpus[i], corpus[j]) for i in range(len(corpus))
                  for j in range(max(0, i - window), min(len(corpus), i + window + 1)) if i != j])
sg = SkipGramModel(vocab_size, emb_dim)
sync(sg)
sg_net = comp(sg)
LOSSES = []
for opt_name in ("SparseAdam", "SGD"):
    optimizer = torch.optim.SparseAdam(list(sg.parameters()), lr=0.01) if opt_name == "SparseAdam" \
        else torch.optim.SGD(sg.parameters(), lr=0.5)
    for step in range(3):
        batch = pairs[r.choice(len(pairs), 64, replace=False)]
        pos_u, pos_v = torch.from_numpy(batch[:, 0]), torch.from_numpy(batch[:, 1])
        # negatives from the unigram^0.75 table (drawn in numpy, as torch.multinomial would)
        neg_v = torch.from_numpy(r.choice(vocab_size, (64, n_neg), p=pow_freq / pow_freq.sum()))
        optimizer.zero_grad()
        loss = sg_net(pos_u, pos_v, neg_v)
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
LOSSES.append((sg.u_embeddings.weight.grad.to_dense() != 0).any(1).sum().item())   # rows the batch touched
neg = torch.multinomial(noise_dist, 20000, replacement=True)
freq = torch.bincount(neg, minlength=vocab_size).float() / 20000
LOSSES.append(float((freq - noise_dist).abs().max() < 0.02))
with torch.no_grad():   # nearest neighbours by cosine similarity of the centre embeddings
    emb = F.normalize(sg.u_embeddings.weight, dim=1)
    sims = emb @ emb[:5].t()
    LOSSES.append(sims.topk(3, dim=0).values.sum().item())

# ---- A2C with GAE ----


class Corridor:
    """walk left/right/stay on a line of 7 cells; +1 at the right end, -0.01 a step"""

    def __init__(self, n=7, seed=0):
        self.n, self.rng = n, np.random.default_rng(seed)

    def reset(self):
        self.pos, self.t = int(self.rng.integers(0, 3)), 0
        return self.obs()

    def obs(self):
        o = np.zeros(self.n + 1, np.float32)
        o[self.pos] = 1.0
        o[-1] = self.t / 20.0
        return o

    def step(self, a):
        self.pos = int(np.clip(self.pos + (a - 1), 0, self.n - 1))
        self.t += 1
        done = self.pos == self.n - 1 or self.t >= 20
        return self.obs(), (1.0 if self.pos == self.n - 1 else -0.01), done


class ActorCritic(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden=32):
        super().__init__()
        self.base = nn.Sequential(nn.Linear(num_inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.actor = nn.Linear(hidden, num_actions)
        self.critic = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.base(x)
        return self.actor(h), self.critic(h).squeeze(-1)


n_envs, n_steps, gamma, gae_lambda = 4, 8, 0.99, 0.95
envs = [Corridor(seed=k) for k in range(n_envs)]
ac = ActorCritic(8, 3)
sync(ac)
ac_net = comp(ac)
opt = torch.optim.RMSprop(ac.parameters(), lr=7e-4, eps=1e-5, alpha=0.99)
obs = torch.from_numpy(np.stack([e.reset() for e in envs]))
ep_returns = np.zeros(n_envs)
finished = []
for update in range(5):
    log_probs, values, rewards, masks, entropies = [], [], [], [], []
    for _ in range(n_steps):
        logits, value = ac_net(obs)
        dist = Categorical(logits=logits)
        # inverse-CDF sampling from numpy uniforms (dist.sample()'s role, the same draws in both runs)
        u = torch.from_numpy(r.random((n_envs, 1)).astype(np.float32))
        action = torch.searchsorted(dist.probs.detach().cumsum(-1), u).squeeze(-1).clamp(max=2)
        log_probs.append(dist.log_prob(action))
        entropies.append(dist.entropy())
        values.append(value)
        nxt, rew, done = zip(*[e.step(int(a)) for e, a in zip(envs, action)])
        ep_returns += rew
        for k, d in enumerate(done):
            if d:
                finished.append(ep_returns[k]); ep_returns[k] = 0
                nxt = list(nxt); nxt[k] = envs[k].reset()
        obs = torch.from_numpy(np.stack(nxt))
        rewards.append(torch.tensor(rew, dtype=torch.float32))
        masks.append(torch.tensor([0.0 if d else 1.0 for d in done]))
    with torch.no_grad():
        _, next_value = ac_net(obs)
    returns, gae = [None] * n_steps, torch.zeros(n_envs)
    for step in reversed(range(n_steps)):
        next_v = next_value if step == n_steps - 1 else values[step + 1].detach()
        delta = rewards[step] + gamma * next_v * masks[step] - values[step].detach()
        gae = delta + gamma * gae_lambda * masks[step] * gae
        returns[step] = gae + values[step].detach()
    values, log_probs, entropies = torch.stack(values), torch.stack(log_probs), torch.stack(entropies)
    returns = torch.stack(returns)
    advantages = returns - values.detach()
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-5)
    value_loss = (returns - values).pow(2).mean()
    action_loss = -(advantages * log_probs).mean()
    loss = value_loss * 0.5 + action_loss - 0.01 * entropies.mean()
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(ac.parameters(), 0.5)
    opt.step()
    LOSSES += [loss.item(), value_loss.item()]
LOSSES += [len(finished), float(np.sum(finished))]
a = Categorical(logits=torch.zeros(6, 3)).sample()
LOSSES.append(float(a.min() >= 0 and a.max() <= 2))
