"""Lagrangian neural networks (Cranmer et al.) as their PyTorch ports train them.

An MLP Lagrangian L(q, q_t) (width 128, Softplus) on a double pendulum's states, batch 64:
the accelerations from the Euler-Lagrange equations,
q_tt = pinv(d2L/dq_t2) (dL/dq - d2L/dq_t dq q_t), by ``torch.func``'s ``hessian`` and
``jacrev`` composed and ``vmap``ped over the batch with ``functional_call``; a squared error
against the analytic accelerations, Adam. Compiled: the network's equations of motion.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.func import functional_call, hessian, jacrev, vmap

from .common import load_params, rng

NAME = "lnn"
BATCH, HIDDEN = 64, 128


def f_analytical(state, g=9.8):
    t1, t2, w1, w2 = state.T
    a1, a2 = 0.5 * np.cos(t1 - t2), np.cos(t1 - t2)
    f1 = -0.5 * (w2 ** 2) * np.sin(t1 - t2) - g * np.sin(t1)
    f2 = (w1 ** 2) * np.sin(t1 - t2) - g * np.sin(t2)
    return np.stack([(f1 - a1 * f2) / (1 - a1 * a2), (f2 - a2 * f1) / (1 - a1 * a2)], 1)


class LNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lagrangian = nn.Sequential(nn.Linear(4, HIDDEN), nn.Softplus(), nn.Linear(HIDDEN, HIDDEN),
                                        nn.Softplus(), nn.Linear(HIDDEN, 1))

    def forward(self, state):
        params = dict(self.lagrangian.named_parameters())

        def L(q, q_t):
            return functional_call(self.lagrangian, params, (torch.cat([q, q_t], -1),)).squeeze(-1)

        def eom(x):
            q, q_t = torch.split(x, 2, dim=-1)
            H = hessian(L, argnums=1)(q, q_t)
            mixed = jacrev(jacrev(L, argnums=1), argnums=0)(q, q_t)
            return torch.linalg.pinv(H) @ (jacrev(L, argnums=0)(q, q_t) - mixed @ q_t)
        return vmap(eom)(state)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.net = LNN()
        load_params(NAME, self.net)
        self.model = compile(self.net)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)

    def step(self) -> float:
        x = np.concatenate([self.r.uniform(-0.5, 0.5, (BATCH, 2)), self.r.uniform(-1, 1, (BATCH, 2))], 1)
        y = torch.from_numpy(f_analytical(x).astype(np.float32))
        loss = ((self.model(torch.from_numpy(x.astype(np.float32))) - y) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
