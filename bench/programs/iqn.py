"""Implicit Quantile Networks on a cart-pole vectorized in torch (the common PyTorch ports'
IQN with Double-DQN targets).

64 cart-poles stepped together in torch (Euler steps of the pole's dynamics, done masks,
resets by torch.where); each step acts epsilon-greedily on the mean of 32 sampled quantiles
under no_grad, stores the transitions in a replay buffer of preallocated tensors at a
wrapping pointer, and learns on 64 sampled transitions: quantile fractions embedded by
cos(pi * i * tau), width 128, the next action by the online network and its quantiles by
a target network synced by load_state_dict every 10 steps, the quantile Huber loss over
all 32 x 32 pairs, Adam, clip_grad_norm_. Fractions and exploration come from numpy.
Compiled: the online and target networks.
"""
import math

import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "iqn"
ENVS, N_TAU, BATCH, GAMMA, CAPACITY = 64, 32, 64, 0.99, 4096


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
        done = (x.abs() > 2.4) | (theta.abs() > 12 * 2 * math.pi / 360) | (self.steps >= 200)
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


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.env = VecCartPole(ENVS, self.r)
        self.online, self.target = IQN(4, 2, 128, 64), IQN(4, 2, 128, 64)
        load_params(NAME, self.online)
        self.target.load_state_dict(self.online.state_dict())
        self.local, self.target_fwd = compile(self.online), compile(self.target)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=5e-4)
        self.memory = {k: torch.zeros(CAPACITY, *s) for k, s in
                       (("s", (4,)), ("r", ()), ("s2", (4,)), ("d", ()))}
        self.memory["a"] = torch.zeros(CAPACITY, dtype=torch.long)
        self.ptr, self.size, self.i = 0, 0, 0
        for _ in range(2):   # a first batch's worth of transitions
            self.collect(1.0)

    def taus(self, n):
        return torch.from_numpy(self.r.random((n, N_TAU)).astype(np.float32))

    def collect(self, eps):
        state = self.env.state.clone()
        with torch.no_grad():
            greedy = self.local(state, self.taus(ENVS)).mean(dim=1).argmax(dim=1)
        explore = torch.from_numpy(self.r.random(ENVS) < eps)
        action = torch.where(explore, torch.from_numpy(self.r.integers(0, 2, ENVS)), greedy)
        next_state, reward, done = self.env.step(action)
        idx = (self.ptr + torch.arange(ENVS)) % CAPACITY
        for k, v in (("s", state), ("a", action), ("r", reward), ("s2", next_state), ("d", done.float())):
            self.memory[k][idx] = v
        self.ptr, self.size = (self.ptr + ENVS) % CAPACITY, min(self.size + ENVS, CAPACITY)

    def step(self) -> float:
        self.collect(max(0.05, 1.0 - self.i / 100))
        idx = torch.from_numpy(self.r.integers(0, self.size, BATCH))
        s, a, rew, s2, d = (self.memory[k][idx] for k in ("s", "a", "r", "s2", "d"))
        with torch.no_grad():
            next_taus = self.taus(BATCH)
            best = self.local(s2, next_taus).mean(dim=1).argmax(dim=1, keepdim=True)
            q_next = self.target_fwd(s2, next_taus).gather(2, best.unsqueeze(1).expand(BATCH, N_TAU, 1))
            q_target = rew.view(-1, 1, 1) + GAMMA * q_next.transpose(1, 2) * (1.0 - d.view(-1, 1, 1))
        taus = self.taus(BATCH)
        q = self.local(s, taus).gather(2, a.view(BATCH, 1, 1).expand(BATCH, N_TAU, 1))
        td = q_target - q
        huber = torch.where(td.abs() <= 1.0, 0.5 * td.pow(2), td.abs() - 0.5)
        loss = (torch.abs(taus.unsqueeze(-1) - (td.detach() < 0).float()) * huber).sum(dim=1).mean()
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.online.parameters(), 1.0)
        self.optimizer.step()
        self.i += 1
        if self.i % 10 == 0:
            self.target.load_state_dict(self.online.state_dict())
        return loss.item()
