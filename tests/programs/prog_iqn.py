from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Implicit Quantile Networks (Dabney et al. 2018, as the common PyTorch ports write it),
# scaled down: a CartPole vectorized over environments in torch (Euler steps of the pole's
# dynamics, done masks, automatic resets by torch.where), quantile fractions tau embedded
# by cos(pi * i * tau) through a ReLU layer and multiplied into the state features,
# epsilon-greedy acting on the mean over sampled quantiles under no_grad, a replay buffer
# of preallocated tensors written at a wrapping pointer, a Double-DQN target from a target
# network loaded by load_state_dict, and the quantile Huber loss over all pairs of
# quantiles (|tau - 1{delta < 0}| * huber / kappa) under Adam with clip_grad_norm_;
# quantile fractions and exploration drawn by numpy (the two frameworks draw different streams)


class VecCartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, num_envs, rng):
        self.num_envs, self.rng = num_envs, rng
        self.state = self._init(num_envs)
        self.steps = torch.zeros(num_envs, dtype=torch.long)

    def _init(self, n):
        return torch.from_numpy(self.rng.uniform(-0.05, 0.05, (n, 4)).astype(np.float32))

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        temp = (force + polemass_length * theta_dot ** 2 * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        next_state = torch.stack([x, x_dot, theta, theta_dot], dim=1)
        self.steps += 1
        done = (x.abs() > 2.4) | (theta.abs() > 12 * 2 * math.pi / 360) | (self.steps >= 50)
        reward = torch.ones(self.num_envs)
        self.state = torch.where(done[:, None], self._init(self.num_envs), next_state)
        self.steps[done] = 0
        return next_state, reward, done


class IQN(nn.Module):
    def __init__(self, state_size, action_size, layer_size=32, n_cos=16):
        super().__init__()
        self.action_size, self.n_cos = action_size, n_cos
        self.register_buffer("pis", torch.FloatTensor([np.pi * i for i in range(1, n_cos + 1)]).view(1, 1, n_cos))
        self.head = nn.Linear(state_size, layer_size)
        self.cos_embedding = nn.Linear(n_cos, layer_size)
        self.ff_1 = nn.Linear(layer_size, layer_size)
        self.ff_2 = nn.Linear(layer_size, action_size)

    def calc_cos(self, taus):
        cos = torch.cos(taus.unsqueeze(-1) * self.pis)
        return cos

    def forward(self, input, taus):
        batch_size, num_tau = taus.shape
        x = torch.relu(self.head(input))
        cos = self.calc_cos(taus).view(batch_size * num_tau, self.n_cos)
        cos_x = torch.relu(self.cos_embedding(cos)).view(batch_size, num_tau, -1)
        x = (x.unsqueeze(1) * cos_x).view(batch_size * num_tau, -1)
        x = torch.relu(self.ff_1(x))
        out = self.ff_2(x)
        return out.view(batch_size, num_tau, self.action_size)


def calculate_huber_loss(td_errors, k=1.0):
    loss = torch.where(td_errors.abs() <= k, 0.5 * td_errors.pow(2), k * (td_errors.abs() - 0.5 * k))
    return loss


class ReplayBuffer:
    def __init__(self, capacity, state_size):
        self.states = torch.zeros(capacity, state_size)
        self.actions = torch.zeros(capacity, dtype=torch.long)
        self.rewards = torch.zeros(capacity)
        self.next_states = torch.zeros(capacity, state_size)
        self.dones = torch.zeros(capacity)
        self.capacity, self.ptr, self.size = capacity, 0, 0

    def add(self, s, a, r, s2, d):
        n = s.shape[0]
        idx = (self.ptr + torch.arange(n)) % self.capacity
        self.states[idx], self.actions[idx], self.rewards[idx] = s, a, r
        self.next_states[idx], self.dones[idx] = s2, d.float()
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, rng, batch_size):
        idx = torch.from_numpy(rng.integers(0, self.size, batch_size))
        return self.states[idx], self.actions[idx], self.rewards[idx], self.next_states[idx], self.dones[idx]


rng = np.random.default_rng(0)
N_ENVS, N_TAU, BATCH, GAMMA = 8, 8, 32, 0.99
env = VecCartPole(N_ENVS, rng)
qnetwork_local = IQN(4, 2); sync(qnetwork_local)
qnetwork_target = IQN(4, 2)
qnetwork_target.load_state_dict(qnetwork_local.state_dict())
local, target = comp(qnetwork_local, dynamic=True, fullgraph=True), comp(qnetwork_target, fullgraph=True)
optimizer = torch.optim.Adam(qnetwork_local.parameters(), lr=1e-3)
memory = ReplayBuffer(256, 4)
LOSSES = []


def taus_like(n, k):
    return torch.from_numpy(rng.random((n, k)).astype(np.float32))


def act(state, eps):
    with torch.no_grad():
        action_values = local(state, taus_like(state.shape[0], N_TAU)).mean(dim=1)
    greedy = action_values.argmax(dim=1)
    random_actions = torch.from_numpy(rng.integers(0, 2, state.shape[0]))
    explore = torch.from_numpy(rng.random(state.shape[0]) < eps)
    return torch.where(explore, random_actions, greedy)


def learn(experiences):
    states, actions, rewards, next_states, dones = experiences
    with torch.no_grad():
        next_taus = taus_like(BATCH, N_TAU)
        best = local(next_states, next_taus).mean(dim=1).argmax(dim=1, keepdim=True)
        Q_targets_next = target(next_states, next_taus).gather(2, best.unsqueeze(1).expand(BATCH, N_TAU, 1))
        Q_targets = rewards.view(-1, 1, 1) + GAMMA * Q_targets_next.transpose(1, 2) * (1. - dones.view(-1, 1, 1))
    taus = taus_like(BATCH, N_TAU)
    Q_expected = local(states, taus).gather(2, actions.view(BATCH, 1, 1).expand(BATCH, N_TAU, 1))
    td_error = Q_targets - Q_expected
    assert td_error.shape == (BATCH, N_TAU, N_TAU), "wrong td error shape"
    huber_l = calculate_huber_loss(td_error, 1.0)
    quantil_l = abs(taus.unsqueeze(-1) - (td_error.detach() < 0).float()) * huber_l / 1.0
    loss = quantil_l.sum(dim=1).mean(dim=1).mean()
    optimizer.zero_grad()
    loss.backward()
    gn = nn.utils.clip_grad_norm_(qnetwork_local.parameters(), 1.0)
    optimizer.step()
    return loss.item(), gn.item()


state = env.state.clone()
episode_returns = torch.zeros(N_ENVS)
finished = []
for t in range(12):
    eps = max(0.05, 1.0 - t / 10)
    action = act(state, eps)
    next_state, reward, done = env.step(action)
    memory.add(state, action, reward, next_state, done)
    episode_returns += reward
    finished += episode_returns[done].tolist()
    episode_returns[done] = 0
    state = env.state.clone()
    if memory.size >= BATCH and t % 3 == 0:
        LOSSES += list(learn(memory.sample(rng, BATCH)))
    if t % 6 == 5:
        qnetwork_target.load_state_dict(qnetwork_local.state_dict())
LOSSES += [float(sum(finished)), len(finished), state.abs().sum().item()]
