"""Soft Actor-Critic updates, as Spinning Up's sac/sac.py and sac/core.py write them.

HalfCheetah's sizes (17 observations, 6 actions), two hidden layers of 256, batch 100
from a numpy replay buffer: a tanh-squashed Gaussian actor (``Normal``, its ``log_prob``
with the tanh correction, ``sum(axis=-1)``), twin Q networks whose weights are frozen for
the policy loss, targets by Polyak averaging (``p_targ.data.mul_(polyak)``,
``add_((1 - polyak) * p.data)``), a learned entropy temperature ``log_alpha``, three Adams.
The reparameterization noise comes from numpy. One step is one update. Compiled: the
actor, the two Q networks and their targets.
"""
import copy
import itertools

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions.normal import Normal

from .common import load_params, rng

NAME = "sac"
OBS, ACT, HIDDEN, BATCH, BUFFER = 17, 6, 256, 100, 2000


def mlp(sizes, activation, output_activation=nn.Identity):
    layers = []
    for j in range(len(sizes) - 1):
        act = activation if j < len(sizes) - 2 else output_activation
        layers += [nn.Linear(sizes[j], sizes[j + 1]), act()]
    return nn.Sequential(*layers)


class SquashedGaussianMLPActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp([OBS, HIDDEN, HIDDEN], nn.ReLU, nn.ReLU)
        self.mu_layer = nn.Linear(HIDDEN, ACT)
        self.log_std_layer = nn.Linear(HIDDEN, ACT)

    def forward(self, obs, eps):
        net_out = self.net(obs)
        mu = self.mu_layer(net_out)
        std = torch.exp(torch.clamp(self.log_std_layer(net_out), -20, 2))
        pi_action = mu + std * eps   # rsample, its noise drawn with numpy
        logp_pi = Normal(mu, std).log_prob(pi_action).sum(axis=-1)
        logp_pi -= (2 * (np.log(2) - pi_action - F.softplus(-2 * pi_action))).sum(axis=1)
        return torch.tanh(pi_action), logp_pi


class MLPQFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = mlp([OBS + ACT, HIDDEN, HIDDEN, 1], nn.ReLU)

    def forward(self, obs, act):
        return torch.squeeze(self.q(torch.cat([obs, act], dim=-1)), -1)


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.pi, self.q1, self.q2 = SquashedGaussianMLPActor(), MLPQFunction(), MLPQFunction()


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.buf = {"obs": r.standard_normal((BUFFER, OBS)), "obs2": r.standard_normal((BUFFER, OBS)),
                    "act": r.uniform(-1, 1, (BUFFER, ACT)), "rew": r.standard_normal(BUFFER),
                    "done": (r.random(BUFFER) < 0.01).astype(np.float64)}
        self.r = rng(NAME, "batches")
        self.ac = ActorCritic()
        load_params(NAME, self.ac)
        self.ac_targ = copy.deepcopy(self.ac)
        for p in self.ac_targ.parameters():
            p.requires_grad = False
        self.q_params = list(itertools.chain(self.ac.q1.parameters(), self.ac.q2.parameters()))
        self.pi, self.q1, self.q2 = compile(self.ac.pi), compile(self.ac.q1), compile(self.ac.q2)
        self.q1_targ, self.q2_targ = compile(self.ac_targ.q1), compile(self.ac_targ.q2)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.pi_optimizer = torch.optim.Adam(self.ac.pi.parameters(), lr=1e-3)
        self.q_optimizer = torch.optim.Adam(self.q_params, lr=1e-3)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=1e-3)

    def step(self) -> float:
        idxs = self.r.integers(0, BUFFER, size=BATCH)
        d = {k: torch.as_tensor(v[idxs], dtype=torch.float32) for k, v in self.buf.items()}
        eps, eps2 = (torch.as_tensor(self.r.standard_normal((BATCH, ACT)), dtype=torch.float32) for _ in range(2))
        alpha = self.log_alpha.exp().detach()
        o, a = d["obs"], d["act"]
        self.q_optimizer.zero_grad()
        q1, q2 = self.q1(o, a), self.q2(o, a)
        with torch.no_grad():
            a2, logp_a2 = self.pi(d["obs2"], eps2)
            q_pi_targ = torch.min(self.q1_targ(d["obs2"], a2), self.q2_targ(d["obs2"], a2))
            backup = d["rew"] + 0.99 * (1 - d["done"]) * (q_pi_targ - alpha * logp_a2)
        loss_q = ((q1 - backup) ** 2).mean() + ((q2 - backup) ** 2).mean()
        loss_q.backward()
        self.q_optimizer.step()
        for p in self.q_params:
            p.requires_grad = False
        self.pi_optimizer.zero_grad()
        pi, logp_pi = self.pi(o, eps)
        loss_pi = (alpha * logp_pi - torch.min(self.q1(o, pi), self.q2(o, pi))).mean()
        loss_pi.backward()
        self.pi_optimizer.step()
        for p in self.q_params:
            p.requires_grad = True
        alpha_loss = -(self.log_alpha * (logp_pi.detach() - ACT)).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        with torch.no_grad():
            for p, p_targ in zip(self.ac.parameters(), self.ac_targ.parameters()):
                p_targ.data.mul_(0.995)
                p_targ.data.add_((1 - 0.995) * p.data)
        return loss_q.item() + loss_pi.item()
