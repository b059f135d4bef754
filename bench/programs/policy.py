"""REINFORCE on a cart-pole, as pytorch/examples' reinforcement_learning/reinforce.py
writes it.

A policy ``Linear(4, 128)``, ReLU, ``Linear(128, 2)``, softmax, called once per
environment step on one state; a ``torch.distributions.Categorical`` per step for the
action and its ``log_prob``; at the episode's end the discounted returns normalized, the
loss ``sum(-log_prob * return)``, Adam(1e-2). One step is one 50-step episode and its
update. The cart-pole is simulated in numpy; actions are drawn by the Gumbel-max trick
with noise from numpy (argmax of the distribution's logits plus Gumbel noise: the same
distribution ``sample()`` draws from), so both frameworks take the same actions. The
example's dropout is left out for the same reason. Compiled: the policy.
"""
import math
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

from .common import load_params, rng

NAME = "policy"
EPISODE, GAMMA, EPISODES = 50, 0.99, 4
eps = np.finfo(np.float32).eps.item()


class CartPole:
    """The classic cart-pole dynamics (Barto, Sutton and Anderson), Euler steps of 20 ms."""
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, r):
        self.r = r
        self.reset()

    def reset(self):
        self.state = self.r.uniform(-0.05, 0.05, 4)
        return self.state.copy()

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        force = self.force_mag if action == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        self.state = np.array([x + self.tau * x_dot, x_dot + self.tau * xacc,
                               theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc])
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        if done:
            self.reset()
        return self.state.copy(), 1.0, done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.noise = [-np.log(-np.log(r.random((EPISODE, 1, 2)))).astype(np.float32)
                      for _ in range(EPISODES)]
        self.starts = [r.uniform(-0.05, 0.05, 4) for _ in range(EPISODES)]
        self.env = CartPole(rng(NAME, "env"))
        self.policy = Policy()
        load_params(NAME, self.policy)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)
        self.forward = compile(self.policy)
        self.i = 0

    def select_action(self, state, gumbel):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = self.forward(state)
        m = Categorical(probs)
        action = (m.logits + torch.from_numpy(gumbel)).argmax(dim=-1)
        self.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def step(self) -> float:
        k = self.i % EPISODES
        self.i += 1
        self.env.state = self.starts[k].copy()
        state = self.env.state.copy()
        self.saved_log_probs, rewards = [], []
        for t in range(EPISODE):
            action = self.select_action(state, self.noise[k][t])
            state, reward, done = self.env.step(action)
            rewards.append(reward)
        R = 0
        returns = deque()
        for r in rewards[::-1]:
            R = r + GAMMA * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss = []
        for log_prob, R in zip(self.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        self.optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        self.optimizer.step()
        return policy_loss.item()
