"""SchNet energy and force matching on random molecules (PyTorch Geometric's layers, written
out without the library).

Batches of 16 molecules of 8 to 24 atoms joined into one graph with a batch vector; a radius
graph per batch by ``torch.cdist``, a same-molecule mask and a 3.0 cutoff, its edges by
``nonzero`` (outside the compiled model); the model: edge lengths from ``pos[row] -
pos[col]``, 32 Gaussian RBFs, three interaction blocks of continuous-filter convolutions
(a filter MLP with the shifted softplus, a cosine cutoff, messages ``x[col] * W`` summed by
``index_add_``), width 64, per-molecule energies by ``scatter_add_``. Forces are
``-autograd.grad(energy, pos, create_graph=True)`` and the loss matches both, so each step
differentiates the compiled forward twice. 4 batches cycled (node and edge counts
dynamic), Adam. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "schnet"
MOLECULES, HIDDEN, GAUSSIANS, CUTOFF = 16, 64, 32, 3.0


def ssp(x):
    return F.softplus(x) - math.log(2.0)


class Interaction(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp1 = nn.Linear(GAUSSIANS, HIDDEN)
        self.mlp2 = nn.Linear(HIDDEN, HIDDEN)
        self.lin1 = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.lin2 = nn.Linear(HIDDEN, HIDDEN)
        self.lin = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, h, row, col, edge_weight, edge_attr):
        c = 0.5 * (torch.cos(edge_weight * math.pi / CUTOFF) + 1.0)
        w = self.mlp2(ssp(self.mlp1(edge_attr))) * c.view(-1, 1)
        x = self.lin1(h)
        out = torch.zeros_like(x).index_add_(0, row, x[col] * w)
        return self.lin(ssp(self.lin2(out)))


class SchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, HIDDEN)
        self.register_buffer("offset", torch.linspace(0.0, CUTOFF, GAUSSIANS))
        self.interactions = nn.ModuleList([Interaction() for _ in range(3)])
        self.out1 = nn.Linear(HIDDEN, HIDDEN // 2)
        self.out2 = nn.Linear(HIDDEN // 2, 1)

    def forward(self, z, pos, batch, edge_index):
        row, col = edge_index
        edge_weight = (pos[row] - pos[col]).norm(dim=-1)
        coeff = -0.5 / (CUTOFF / (GAUSSIANS - 1)) ** 2
        edge_attr = torch.exp(coeff * (edge_weight.view(-1, 1) - self.offset.view(1, -1)) ** 2)
        h = self.embedding(z)
        for block in self.interactions:
            h = h + block(h, row, col, edge_weight, edge_attr)
        e = self.out2(ssp(self.out1(h)))
        return torch.zeros(MOLECULES, 1).scatter_add_(0, batch.view(-1, 1), e).squeeze(-1)


def morse(pos, z, batch):
    """Energies and forces of a Morse pair potential inside each molecule (float64)."""
    d = pos[:, None] - pos[None]
    r = np.linalg.norm(d, axis=-1)
    same = (batch[:, None] == batch[None]) & ~np.eye(len(pos), dtype=bool)
    depth = 0.1 * np.sqrt(np.outer(z, z)) * same
    e = np.exp(-1.5 * (r - 1.2))
    pair = depth * ((1 - e) ** 2 - 1)
    de_dr = depth * 2 * (1 - e) * 1.5 * e
    forces = -(de_dr / np.where(same, r, 1.0))[..., None] * d
    energy = np.zeros(MOLECULES)
    np.add.at(energy, batch, 0.5 * pair.sum(1))
    return energy, forces.sum(1)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            sizes = r.integers(8, 25, MOLECULES)
            batch = np.repeat(np.arange(MOLECULES), sizes)
            cells = np.stack(np.meshgrid(*[np.arange(4)] * 3, indexing="ij"), -1).reshape(-1, 3)
            pos = np.concatenate([cells[r.permutation(64)[:n]] * 1.1 for n in sizes])
            pos = pos + 0.15 * r.standard_normal(pos.shape)   # atoms on a jittered lattice
            z = r.integers(1, 6, len(batch))
            energy, forces = morse(pos, z, batch)
            energy, forces = energy / 10.0, forces / 10.0   # (units of 10: targets of order 1)
            self.batches.append((torch.from_numpy(z), torch.from_numpy(pos.astype(np.float32)),
                                 torch.from_numpy(batch), torch.from_numpy(energy.astype(np.float32)),
                                 torch.from_numpy(forces.astype(np.float32))))
        self.model = SchNet()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=5e-4)
        self.i = 0

    def step(self) -> float:
        z, pos, batch, energy, forces = self.batches[self.i % len(self.batches)]
        self.i += 1
        pos = pos.clone().requires_grad_(True)
        with torch.no_grad():
            mask = (torch.cdist(pos, pos) < CUTOFF) & (batch.view(-1, 1) == batch.view(1, -1))
            mask.fill_diagonal_(False)
            edge_index = mask.nonzero().t()
        pred = self.forward(z, pos, batch, edge_index)
        pred_forces = -torch.autograd.grad(pred.sum(), pos, create_graph=True)[0]
        loss = F.mse_loss(pred, energy) + 10.0 * F.mse_loss(pred_forces, forces)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
