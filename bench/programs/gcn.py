"""A two-layer graph convolutional network (Kipf and Welling) written without a graph
library, as tutorials write message passing by hand.

A Cora-sized citation graph (2708 nodes, 1433 bag-of-words features, 7 classes, 5278
undirected edges and a self-loop per node), the symmetric normalization computed from
the edge list every call (degrees by ``index_add_``, ``pow(-0.5)`` with the infinities
masked), messages gathered by ``index_select`` over the source nodes and summed into
their targets by ``index_add_``; ReLU, ``log_softmax``, NLL over the 140 training nodes,
Adam with weight decay. Compiled: the model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, random_graph

NAME = "gcn"
NODES, FEATURES, CLASSES, HIDDEN, EDGES = 2708, 1433, 7, 16, 5278


class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        n = x.size(0)
        deg = torch.zeros(n, dtype=x.dtype).index_add_(0, dst, torch.ones(dst.size(0), dtype=x.dtype))
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0.0)
        norm = deg_inv_sqrt[src] * deg_inv_sqrt[dst]
        h = self.lin(x)
        messages = h.index_select(0, src) * norm.view(-1, 1)
        out = torch.zeros_like(h).index_add_(0, dst, messages)
        return out + self.bias


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(FEATURES, HIDDEN)
        self.conv2 = GCNConv(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = self.conv2(x, edge_index)
        return F.log_softmax(x, dim=1)


class Program:
    def __init__(self, compile):
        self.x, self.edge_index, self.y, self.train_idx = random_graph(NAME, NODES, EDGES, FEATURES, CLASSES)
        self.model = GCN()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01, weight_decay=5e-4)
        self.forward = compile(self.model)

    def step(self) -> float:
        self.model.train()
        self.optimizer.zero_grad()
        out = self.forward(self.x, self.edge_index)
        loss = F.nll_loss(out[self.train_idx], self.y[self.train_idx])
        loss.backward()
        self.optimizer.step()
        return loss.item()
