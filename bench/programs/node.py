"""A neural ODE fitted to a spiral, as torchdiffeq's ``ode_demo.py`` writes it, with a
fixed-step RK4 integrator in Python instead of the library.

The vector field: an MLP 2 -> 50 -> 50 -> 2 (tanh) applied to y**3; the true system
dy/dt = y**3 A. Each step draws 16 start points from the true trajectory (100 points
on [0, 2.5]), integrates 10 time steps by RK4 (four calls of the field per step, 40 in
all: a Python loop over many small ops), and takes the mean absolute error of the
trajectory; RMSprop. Compiled: the vector field.
"""
import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "node"
DATA_SIZE, BATCH_TIME, BATCH_SIZE, HIDDEN = 100, 10, 16, 50


class ODEFunc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                                 nn.Linear(HIDDEN, 2))

    def forward(self, t, y):
        return self.net(y ** 3)


class Lambda(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("A", torch.tensor([[-0.1, 2.0], [-2.0, -0.1]]))

    def forward(self, t, y):
        return torch.mm(y ** 3, self.A)


def rk4_step(func, t, dt, y):
    k1 = func(t, y)
    k2 = func(t + dt / 2, y + dt * k1 / 2)
    k3 = func(t + dt / 2, y + dt * k2 / 2)
    k4 = func(t + dt, y + dt * k3)
    return y + dt * (k1 + 2 * k2 + 2 * k3 + k4) / 6


def odeint(func, y0, t):
    ys = [y0]
    y = y0
    for i in range(len(t) - 1):
        y = rk4_step(func, t[i], t[i + 1] - t[i], y)
        ys.append(y)
    return torch.stack(ys)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.t = torch.linspace(0., 2.5, DATA_SIZE)
        with torch.no_grad():
            self.true_y = odeint(Lambda(), torch.tensor([[2., 0.]]), self.t)
        self.model = ODEFunc()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=1e-3)
        self.func = compile(self.model)

    def get_batch(self):
        s = torch.from_numpy(self.r.choice(np.arange(DATA_SIZE - BATCH_TIME, dtype=np.int64), BATCH_SIZE,
                                           replace=False))
        batch_y0 = self.true_y[s]
        batch_t = self.t[:BATCH_TIME]
        batch_y = torch.stack([self.true_y[s + i] for i in range(BATCH_TIME)], dim=0)
        return batch_y0, batch_t, batch_y

    def step(self) -> float:
        self.optimizer.zero_grad()
        batch_y0, batch_t, batch_y = self.get_batch()
        pred_y = odeint(self.func, batch_y0, batch_t)
        loss = torch.mean(torch.abs(pred_y - batch_y))
        loss.backward()
        self.optimizer.step()
        return loss.item()
