"""A physics-informed neural network for Burgers' equation, as Raissi et al.'s PINN
tutorials write it in PyTorch.

u(x, t) by an MLP 2 -> 20 x 8 (tanh) -> 1; the PDE residual u_t + u u_x - (0.01/pi) u_xx
at 4096 collocation points, its derivatives by ``torch.autograd.grad(...,
create_graph=True)`` (first, then second order in x), plus the mean squared error on 100
initial and boundary points; Adam(1e-3), full batch. The loss's backward differentiates
the derivatives again (a double backward). Compiled: the network (torch.compile cannot:
it has no double backward).
"""
import math

import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "pinn"
N_F, N_U, WIDTH, DEPTH = 4096, 100, 20, 8
NU = 0.01 / math.pi


class PINN(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [2] + [WIDTH] * DEPTH + [1]
        self.linears = nn.ModuleList([nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:])])
        self.activation = nn.Tanh()

    def forward(self, x, t):
        a = torch.cat([x, t], dim=1)
        for layer in self.linears[:-1]:
            a = self.activation(layer(a))
        return self.linears[-1](a)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.x_f = torch.from_numpy(r.uniform(-1, 1, (N_F, 1)).astype("float32")).requires_grad_(True)
        self.t_f = torch.from_numpy(r.uniform(0, 1, (N_F, 1)).astype("float32")).requires_grad_(True)
        # initial condition u(x, 0) = -sin(pi x), boundaries u(+-1, t) = 0
        x0 = r.uniform(-1, 1, (N_U // 2, 1)).astype("float32")
        tb = r.uniform(0, 1, (N_U // 2, 1)).astype("float32")
        xb = r.choice([-1.0, 1.0], (N_U // 2, 1)).astype("float32")
        self.x_u = torch.cat([torch.from_numpy(x0), torch.from_numpy(xb)])
        self.t_u = torch.cat([torch.zeros(N_U // 2, 1), torch.from_numpy(tb)])
        self.u = torch.cat([-torch.sin(math.pi * torch.from_numpy(x0)), torch.zeros(N_U // 2, 1)])
        self.model = PINN()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.net = compile(self.model)

    def residual(self, x, t):
        u = self.net(x, t)
        u_x, u_t = torch.autograd.grad(u, [x, t], grad_outputs=torch.ones_like(u), create_graph=True)
        u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), create_graph=True)[0]
        return u_t + u * u_x - NU * u_xx

    def step(self) -> float:
        self.optimizer.zero_grad()
        f = self.residual(self.x_f, self.t_f)
        loss = torch.mean((self.net(self.x_u, self.t_u) - self.u) ** 2) + torch.mean(f ** 2)
        loss.backward()
        self.optimizer.step()
        return loss.item()
