"""Graph classification with GIN, batching graphs of different sizes as a paper repository
does without a graph library.

Mini-batches of 32 graphs of 10 to 40 nodes (molecule-sized), joined by a ``collate_fn``
that offsets edge indices and builds the node -> graph vector; three GIN layers
(``zeros_like(x).index_add_(0, dst, x[src])``, an MLP with BatchNorm1d), a readout of the
per-graph mean and max by ``scatter_reduce``, a two-layer head, cross-entropy, Adam. Every
batch has its own node and edge counts, so a compiled forward must take them as dynamic
sizes (it sees 4 batches, cycled). Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

from .common import load_params, rng

NAME = "gin"
GRAPHS, BATCH, FEATURES, HIDDEN, CLASSES = 128, 32, 16, 64, 2


def collate(batch):
    xs, eis, bs, ys, off = [], [], [], [], 0
    for i, (x, ei, y) in enumerate(batch):
        xs.append(x)
        eis.append(ei + off)
        bs.append(torch.full((x.size(0),), i, dtype=torch.long))
        ys.append(y)
        off += x.size(0)
    return torch.cat(xs), torch.cat(eis, 1), torch.cat(bs), torch.tensor(ys)


class GINConv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.BatchNorm1d(d_out), nn.ReLU(), nn.Linear(d_out, d_out))
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, x, edge_index):
        src, dst = edge_index
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        return self.mlp((1 + self.eps) * x + agg)


class GIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([GINConv(FEATURES, HIDDEN), GINConv(HIDDEN, HIDDEN), GINConv(HIDDEN, HIDDEN)])
        self.head = nn.Sequential(nn.Linear(2 * HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))

    def forward(self, x, edge_index, batch):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        idx = batch.unsqueeze(-1).expand(-1, x.size(1))
        pooled = x.new_zeros(BATCH, x.size(1))
        mean = pooled.scatter_reduce(0, idx, x, reduce="mean", include_self=False)
        mx = pooled.scatter_reduce(0, idx, x, reduce="amax", include_self=False)
        return self.head(torch.cat([mean, mx], -1))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        graphs = []
        for _ in range(GRAPHS):
            n = int(r.integers(10, 41))
            ei = r.integers(0, n, (2, 2 * n))
            x = r.standard_normal((n, FEATURES)).astype(np.float32)
            graphs.append((torch.from_numpy(x), torch.from_numpy(np.concatenate([ei, ei[::-1]], 1)),
                           int(x[:, 0].sum() > 0)))
        self.batches = list(DataLoader(graphs, batch_size=BATCH, collate_fn=collate))
        self.model = GIN()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.i = 0

    def step(self) -> float:
        x, ei, b, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.forward(x, ei, b), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()
