"""Model-agnostic meta-learning (Finn et al.) on sinusoid regression, as the MAML
tutorials write it with ``torch.func.functional_call``.

An MLP 1 -> 40 -> 40 -> 1 (ReLU); per meta-step 25 tasks (amplitude and phase drawn per
task), each: 10 support points, one inner SGD step (lr 0.01) on the weights as a dict,
its gradient by ``torch.autograd.grad(create_graph=True)``, then the query loss of the
adapted weights; the mean query loss's backward is second order; Adam(1e-3) on the
meta-parameters. Dozens of small ops per task: a per-call overhead workload. Compiled:
the network, called through ``functional_call`` (torch.compile cannot: it has no double
backward).
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from .common import load_params, rng

NAME = "maml"
TASKS, K, INNER_LR = 25, 10, 0.01


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
        load_params(NAME, self.model)
        self.net = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.batches = []
        for _ in range(4):
            amp = r.uniform(0.1, 5.0, (TASKS, 1, 1)); phase = r.uniform(0, np.pi, (TASKS, 1, 1))
            x = r.uniform(-5, 5, (TASKS, 2 * K, 1))
            y = amp * np.sin(x - phase)
            self.batches.append([tuple(torch.from_numpy(a.astype("float32")) for a in
                                       (x[i, :K], y[i, :K], x[i, K:], y[i, K:])) for i in range(TASKS)])
        self.i = 0

    def step(self) -> float:
        tasks = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        meta_loss = 0.0
        for xs, ys, xq, yq in tasks:
            params = dict(self.model.named_parameters())
            loss = F.mse_loss(functional_call(self.net, params, (xs,)), ys)
            grads = torch.autograd.grad(loss, params.values(), create_graph=True)
            params = {n: p - INNER_LR * g for (n, p), g in zip(params.items(), grads)}
            meta_loss = meta_loss + F.mse_loss(functional_call(self.net, params, (xq,)), yq)
        meta_loss = meta_loss / len(tasks)
        meta_loss.backward()
        self.optimizer.step()
        return meta_loss.item()
