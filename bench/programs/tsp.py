"""Kool et al.'s attention model for TSP trained by REINFORCE, as the public ports write it.

20 nodes, batch 128: a 3-layer ``nn.TransformerEncoder`` (width 64, 4 heads) over the
coordinates, then 20 decoding steps in a Python loop: a context of the graph embedding
and the first and last nodes' embeddings (``gather``), a masked multi-head glimpse,
tanh-clipped logits, ``masked_fill(-inf)`` of visited nodes, ``Categorical`` log-probs
(the choice by inverse CDF of numpy uniforms: the frameworks' generators differ),
``mask.scatter(1, idx, True)``; tour length by ``gather`` and ``torch.roll``, an
exponential moving baseline, gradient clipping, Adam. Compiled: the model (encoder and
the whole decoding loop).
"""
import math

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

from .common import load_params, rng

NAME = "tsp"
N, D, HEADS, BATCH = 20, 64, 4, 128


class AttentionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.init_embed = nn.Linear(2, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False)
        self.project_node_embeddings = nn.Linear(D, 3 * D, bias=False)
        self.project_fixed_context = nn.Linear(D, D, bias=False)
        self.project_step_context = nn.Linear(2 * D, D, bias=False)
        self.project_out = nn.Linear(D, D, bias=False)
        self.W_placeholder = nn.Parameter(torch.zeros(2 * D))

    def forward(self, coords, u):
        b, n, _ = coords.shape
        emb = self.encoder(self.init_embed(coords))
        fixed_ctx = self.project_fixed_context(emb.mean(1))[:, None, :]
        gk, gv, logit_k = self.project_node_embeddings(emb).chunk(3, dim=-1)
        gk = gk.view(b, n, HEADS, -1).transpose(1, 2)
        gv = gv.view(b, n, HEADS, -1).transpose(1, 2)
        mask = torch.zeros(b, n, dtype=torch.bool)
        first = last = None
        log_ps, tour = [], []
        for step in range(n):
            if step == 0:
                step_ctx = self.W_placeholder[None, None, :].expand(b, 1, -1)
            else:
                idx = torch.stack([first, last], 1)[:, :, None].expand(-1, -1, D)
                step_ctx = emb.gather(1, idx).view(b, 1, 2 * D)
            q = (fixed_ctx + self.project_step_context(step_ctx)).view(b, 1, HEADS, -1).transpose(1, 2)
            compat = (q @ gk.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(mask[:, None, None, :], float("-inf"))
            glimpse = self.project_out((torch.softmax(compat, -1) @ gv).transpose(1, 2).reshape(b, 1, D))
            logits = torch.tanh((glimpse @ logit_k.transpose(-2, -1)).squeeze(1) / math.sqrt(D)) * 10.0
            dist = Categorical(logits=logits.masked_fill(mask, float("-inf")))
            selected = (dist.probs.cumsum(-1) < u[:, step:step + 1]).sum(-1).clamp(max=n - 1)
            log_ps.append(dist.log_prob(selected))
            tour.append(selected)
            mask = mask.scatter(1, selected[:, None], True)
            first = selected if step == 0 else first
            last = selected
        return torch.stack(tour, 1), torch.stack(log_ps, 1).sum(1)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = AttentionModel()
        load_params(NAME, self.model)
        self.policy = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.baseline = None

    def step(self) -> float:
        coords = torch.from_numpy(self.r.random((BATCH, N, 2)).astype(np.float32))
        u = torch.from_numpy(self.r.random((BATCH, N)).astype(np.float32))
        tour, log_p = self.policy(coords, u)
        d = coords.gather(1, tour[..., None].expand(-1, -1, 2))
        cost = (d - d.roll(-1, dims=1)).norm(p=2, dim=-1).sum(1)
        mean = cost.mean().detach()
        self.baseline = mean if self.baseline is None else 0.8 * self.baseline + 0.2 * mean
        loss = ((cost - self.baseline) * log_p).mean()
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()
