"""A DLRM training step (facebookresearch/dlrm's DLRM_Net, small).

Eight nn.EmbeddingBag tables (1000-20000 rows of 16, mode "sum", sparse gradients) fed
flat ids with offsets, 1 to 12 ids a bag so every batch's id counts differ; a bottom MLP
(13-64-16) for the dense features; dot interactions (bmm of the 9 vectors, the strict
lower triangle by torch.triu_indices); a top MLP (52-64-1) under BCEWithLogits; SGD.
Batch 512. Compiled: the model (the id counts dynamic).
"""
import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "dlrm"
TABLES, DIM, DENSE, BATCH = (1000, 5000, 20000, 300, 8000, 2500, 12000, 700), 16, 13, 512


def mlp(sizes):
    layers = []
    for n, m in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(n, m), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb_l = nn.ModuleList([nn.EmbeddingBag(n, DIM, mode="sum", sparse=True) for n in TABLES])
        self.bot_l = mlp([DENSE, 64, DIM])
        n = len(TABLES) + 1
        self.top_l = mlp([DIM + n * (n - 1) // 2, 64, 1])

    def forward(self, dense_x, lS_o, lS_i):
        x = torch.relu(self.bot_l(dense_x))
        ly = [E(lS_i[k], lS_o[k]) for k, E in enumerate(self.emb_l)]
        T = torch.cat([x] + ly, dim=1).view((x.shape[0], -1, DIM))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        li, lj = torch.triu_indices(Z.shape[1], Z.shape[2], offset=1)
        return self.top_l(torch.cat([x, Z[:, li, lj]], dim=1))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = DLRM()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loss_fn = nn.BCEWithLogitsLoss()
        self.batches = []
        for _ in range(4):
            dense = torch.from_numpy(r.standard_normal((BATCH, DENSE)).astype(np.float32))
            offsets, ids = [], []
            for n in TABLES:
                lengths = r.integers(1, 13, BATCH)
                offsets.append(torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)[:-1]])))
                ids.append(torch.from_numpy(r.integers(0, n, int(lengths.sum()))))
            y = torch.from_numpy((r.random((BATCH, 1)) < 0.3).astype(np.float32))
            self.batches.append((dense, torch.stack(offsets), ids, y))
        self.i = 0

    def step(self) -> float:
        dense, offsets, ids, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        loss = self.loss_fn(self.forward(dense, offsets, ids), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
