"""Mamba (Gu and Dao) as mamba-minimal writes it: a selective state space language model.

Batch 8 sequences of 32 tokens, vocabulary 64, width 64, 2 residual blocks: in_proj,
a depthwise causal Conv1d (``groups=d_inner``, padding then slicing), SiLU, softplus step
sizes, and the selective scan as a Python loop over the 32 positions of einsums
(``'b d n, b n -> b d'``); hand-written RMSNorm, tied embedding head, AdamW and
``clip_grad_norm_``. Compiled: the model (one graph of the unrolled scan).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "mamba"
BATCH, LENGTH, VOCAB, D_MODEL, N_LAYER, D_STATE, D_CONV = 8, 32, 64, 64, 2, 16, 4
D_INNER, DT_RANK = 2 * D_MODEL, math.ceil(D_MODEL / 16)


class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MambaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(D_MODEL, D_INNER * 2, bias=False)
        self.conv1d = nn.Conv1d(D_INNER, D_INNER, kernel_size=D_CONV, groups=D_INNER, padding=D_CONV - 1)
        self.x_proj = nn.Linear(D_INNER, DT_RANK + D_STATE * 2, bias=False)
        self.dt_proj = nn.Linear(DT_RANK, D_INNER, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, D_STATE + 1).float().repeat(D_INNER, 1)))
        self.D = nn.Parameter(torch.ones(D_INNER))
        self.out_proj = nn.Linear(D_INNER, D_MODEL, bias=False)

    def forward(self, x):
        (b, l, d) = x.shape
        (x, res) = self.in_proj(x).split(split_size=[D_INNER, D_INNER], dim=-1)
        x = F.silu(self.conv1d(x.transpose(1, 2))[:, :, :l].transpose(1, 2))
        y = self.ssm(x) * F.silu(res)
        return self.out_proj(y)

    def ssm(self, x):
        A = -torch.exp(self.A_log.float())
        (delta, B, C) = self.x_proj(x).split(split_size=[DT_RANK, D_STATE, D_STATE], dim=-1)
        delta = F.softplus(self.dt_proj(delta))
        return self.selective_scan(x, delta, A, B, C, self.D.float())

    def selective_scan(self, u, delta, A, B, C, D):
        (b, l, d_in) = u.shape
        deltaA = torch.exp(torch.einsum('b l d, d n -> b l d n', delta, A))
        deltaB_u = torch.einsum('b l d, b l n, b l d -> b l d n', delta, B, u)
        x = torch.zeros((b, d_in, A.shape[1]))
        ys = []
        for i in range(l):
            x = deltaA[:, i] * x + deltaB_u[:, i]
            ys.append(torch.einsum('b d n, b n -> b d', x, C[:, i, :]))
        return torch.stack(ys, dim=1) + u * D


class ResidualBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.mixer = MambaBlock()
        self.norm = RMSNorm(D_MODEL)

    def forward(self, x):
        return self.mixer(self.norm(x)) + x


class Mamba(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D_MODEL)
        self.layers = nn.ModuleList([ResidualBlock() for _ in range(N_LAYER)])
        self.norm_f = RMSNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.lm_head.weight = self.embedding.weight

    def forward(self, input_ids):
        x = self.embedding(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm_f(x))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = Mamba()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.1)
        self.forward = compile(self.model)

    def step(self) -> float:
        start = self.r.integers(0, VOCAB, (BATCH, 1))
        seq = torch.from_numpy((start + np.arange(LENGTH + 1) * self.r.integers(1, 3, (BATCH, 1))) % VOCAB)
        logits = self.forward(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()
