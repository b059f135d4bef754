"""GraphSAGE with neighbour sampling, as the paper's minibatch code and PyG's
``NeighborLoader`` examples do it, sampling by hand in numpy.

A random graph of 5000 nodes and about 50000 edges (both directions) with 64 features and
8 classes; batches of 128 seed nodes sampled two hops out (up to 10, then 5 neighbours
a node, without replacement) into blocks of relabelled edges, the seeds first among each
block's nodes, so every batch has its own node and edge counts (8 batches, sampled up
front and cycled). Two SAGEConv layers: the mean of neighbours by ``index_select`` and
``index_add_`` over a degree by ``scatter_add_``, then by ``scatter_reduce(reduce="mean")``;
``lin_l(mean) + lin_r(x_dst)``; ReLU and L2-normalized hidden embeddings; NLL, Adam.
Compiled: the model, whose sizes go dynamic.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "sage"
NODES, DEGREE, FEATURES, HIDDEN, CLASSES, SEEDS, FANOUTS = 5000, 10, 64, 128, 8, 128, (10, 5)


def sample_blocks(seeds, rowptr, col, r):
    blocks, nodes = [], seeds
    for k in FANOUTS:
        srcs, dsts = [], []
        for i, v in enumerate(nodes):
            nbrs = col[rowptr[v]:rowptr[v + 1]]
            if len(nbrs) > k:
                nbrs = r.choice(nbrs, k, replace=False)
            srcs.append(nbrs)
            dsts.append(np.full(len(nbrs), i))
        srcs, dsts = np.concatenate(srcs), np.concatenate(dsts)
        first: dict = {}
        for u in np.concatenate([nodes, srcs]).tolist():
            first.setdefault(u, len(first))
        local = np.array([first[u] for u in srcs.tolist()], dtype=np.int64)
        blocks.insert(0, (torch.from_numpy(np.stack([local, dsts])), len(nodes)))
        nodes = np.array(list(first))
    return torch.from_numpy(nodes), blocks


class SAGEConv(nn.Module):
    def __init__(self, d_in, d_out, aggr):
        super().__init__()
        self.lin_l = nn.Linear(d_in, d_out)
        self.lin_r = nn.Linear(d_in, d_out, bias=False)
        self.aggr = aggr

    def forward(self, x, edge_index, num_dst: int):
        src, dst = edge_index
        msg = x.index_select(0, src)
        if self.aggr == "add":
            out = torch.zeros(num_dst, x.size(1), dtype=x.dtype).index_add_(0, dst, msg)
            deg = torch.zeros(num_dst, dtype=x.dtype).scatter_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
            out = out / deg.clamp(min=1).unsqueeze(-1)
        else:
            out = x.new_zeros(num_dst, x.size(1)).scatter_reduce(
                0, dst.unsqueeze(-1).expand_as(msg), msg, reduce="mean", include_self=False)
        return self.lin_l(out) + self.lin_r(x[:num_dst])


class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(FEATURES, HIDDEN, "add"), SAGEConv(HIDDEN, CLASSES, "mean")])

    def forward(self, x, adjs):
        for i, (edge_index, size) in enumerate(adjs):
            x = self.convs[i](x, edge_index, size)
            if i != len(self.convs) - 1:
                x = F.normalize(F.relu(x), p=2., dim=-1)
        return x.log_softmax(dim=-1)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        src = r.integers(0, NODES, NODES * DEGREE // 2)
        dst = (src + 1 + r.integers(0, NODES - 1, len(src))) % NODES
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        order = np.argsort(dst, kind="stable")
        rowptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=NODES))])
        self.x = torch.from_numpy(r.standard_normal((NODES, FEATURES)).astype(np.float32))
        self.y = torch.from_numpy(r.integers(0, CLASSES, NODES))
        perm = r.permutation(NODES)
        self.batches = []
        for b in range(8):
            seeds = perm[b * SEEDS:(b + 1) * SEEDS]
            n_id, adjs = sample_blocks(seeds, rowptr, src[order], r)
            self.batches.append((torch.from_numpy(seeds), n_id, adjs))
        self.model = SAGE()
        load_params(NAME, self.model)
        self.net = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.i = 0

    def step(self) -> float:
        seeds, n_id, adjs = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        out = self.net(self.x[n_id], adjs)
        loss = F.nll_loss(out, self.y[seeds])
        loss.backward()
        self.optimizer.step()
        return loss.item()
