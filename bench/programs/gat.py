"""A graph attention network (Velickovic et al.) with attention over an edge list,
written as "GAT from scratch" tutorials write it.

The GCN's Cora-sized graph; layer 1: 8 heads of 8 features, concatenated, ELU; layer 2:
one head to the 7 classes. Per edge: attention logits from the source and target halves
(``index_select`` by node), LeakyReLU(0.2), a softmax over each node's incoming edges
(the per-node maximum by ``scatter_reduce(amax)`` on detached logits, sums by
``scatter_add``), messages weighted and summed into the targets by ``index_add_``; NLL
over the training nodes, Adam. Compiled: the model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, random_graph

NAME = "gat"
NODES, FEATURES, CLASSES, HIDDEN, HEADS, EDGES = 2708, 1433, 7, 8, 8, 5278


class GATLayer(nn.Module):
    def __init__(self, in_features, out_features, heads, concat=True):
        super().__init__()
        self.heads, self.out_features, self.concat = heads, out_features, concat
        self.lin = nn.Linear(in_features, heads * out_features, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_features))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_features))
        self.bias = nn.Parameter(torch.zeros(heads * out_features if concat else out_features))

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        n = x.size(0)
        h = self.lin(x).view(n, self.heads, self.out_features)
        alpha_src = (h * self.att_src).sum(dim=-1)
        alpha_dst = (h * self.att_dst).sum(dim=-1)
        e = F.leaky_relu(alpha_src.index_select(0, src) + alpha_dst.index_select(0, dst), 0.2)
        index = dst.unsqueeze(-1).expand_as(e)
        e_max = torch.zeros(n, self.heads, dtype=e.dtype).scatter_reduce(
            0, index, e.detach(), reduce="amax", include_self=False)
        e = (e - e_max.index_select(0, dst)).exp()
        denom = torch.zeros(n, self.heads, dtype=e.dtype).scatter_add(0, index, e)
        alpha = e / (denom.index_select(0, dst) + 1e-16)
        messages = h.index_select(0, src) * alpha.unsqueeze(-1)
        out = torch.zeros_like(h).index_add_(0, dst, messages)
        out = out.reshape(n, -1) if self.concat else out.mean(dim=1)
        return out + self.bias


class GAT(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GATLayer(FEATURES, HIDDEN, HEADS)
        self.conv2 = GATLayer(HIDDEN * HEADS, CLASSES, 1, concat=False)

    def forward(self, x, edge_index):
        x = F.elu(self.conv1(x, edge_index))
        x = self.conv2(x, edge_index)
        return F.log_softmax(x, dim=-1)


class Program:
    def __init__(self, compile):
        self.x, self.edge_index, self.y, self.train_idx = random_graph(NAME, NODES, EDGES, FEATURES, CLASSES)
        self.model = GAT()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
        self.forward = compile(self.model)

    def step(self) -> float:
        self.model.train()
        self.optimizer.zero_grad()
        out = self.forward(self.x, self.edge_index)
        loss = F.nll_loss(out[self.train_idx], self.y[self.train_idx])
        loss.backward()
        self.optimizer.step()
        return loss.item()
