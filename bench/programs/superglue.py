"""SuperGlue as magicleap/SuperGluePretrainedNetwork writes it, trained on synthetic pairs.

Batch 4 of image pairs with 128 and 112 keypoints, descriptors of 64: keypoints normalized
by the image size, a keypoint encoder MLP of 1x1 Conv1d + BatchNorm1d, four attentional GNN
layers (self, cross, self, cross; four-head einsum attention over (b, d, h, n) views), a
final projection, 20 log-domain Sinkhorn iterations (logsumexp over couplings with a
learnable dustbin row and column joined by cat), the negative log-likelihood of the
ground-truth assignment (matches and dustbin entries gathered by index), Adam. Compiled:
the matcher.
"""
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "superglue"
BATCH, N0, N1, DIM, MATCHES = 4, 128, 112, 64, 80


def MLP(channels):
    layers = []
    for i in range(1, len(channels)):
        layers.append(nn.Conv1d(channels[i - 1], channels[i], kernel_size=1, bias=True))
        if i < len(channels) - 1:
            layers += [nn.BatchNorm1d(channels[i]), nn.ReLU()]
    return nn.Sequential(*layers)


def attention(query, key, value):
    scores = torch.einsum('bdhn,bdhm->bhnm', query, key) / query.shape[1] ** .5
    return torch.einsum('bhnm,bdhm->bdhn', torch.nn.functional.softmax(scores, dim=-1), value)


class MultiHeadedAttention(nn.Module):
    def __init__(self, num_heads, d_model):
        super().__init__()
        self.dim, self.num_heads = d_model // num_heads, num_heads
        self.merge = nn.Conv1d(d_model, d_model, kernel_size=1)
        self.proj = nn.ModuleList([deepcopy(self.merge) for _ in range(3)])

    def forward(self, query, key, value):
        b = query.size(0)
        query, key, value = [l(x).view(b, self.dim, self.num_heads, -1)
                             for l, x in zip(self.proj, (query, key, value))]
        return self.merge(attention(query, key, value).contiguous().view(b, self.dim * self.num_heads, -1))


class AttentionalPropagation(nn.Module):
    def __init__(self, feature_dim, num_heads):
        super().__init__()
        self.attn = MultiHeadedAttention(num_heads, feature_dim)
        self.mlp = MLP([feature_dim * 2, feature_dim * 2, feature_dim])

    def forward(self, x, source):
        return self.mlp(torch.cat([x, self.attn(x, source, source)], dim=1))


def log_sinkhorn_iterations(Z, log_mu, log_nu, iters):
    u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
    for _ in range(iters):
        u = log_mu - torch.logsumexp(Z + v.unsqueeze(1), dim=2)
        v = log_nu - torch.logsumexp(Z + u.unsqueeze(2), dim=1)
    return Z + u.unsqueeze(2) + v.unsqueeze(1)


def log_optimal_transport(scores, alpha, iters):
    b, m, n = scores.shape
    one = scores.new_tensor(1)
    ms, ns = (m * one).to(scores), (n * one).to(scores)
    bins0, bins1, alpha = alpha.expand(b, m, 1), alpha.expand(b, 1, n), alpha.expand(b, 1, 1)
    couplings = torch.cat([torch.cat([scores, bins0], -1), torch.cat([bins1, alpha], -1)], 1)
    norm = - (ms + ns).log()
    log_mu = torch.cat([norm.expand(m), ns.log()[None] + norm])
    log_nu = torch.cat([norm.expand(n), ms.log()[None] + norm])
    log_mu, log_nu = log_mu[None].expand(b, -1), log_nu[None].expand(b, -1)
    return log_sinkhorn_iterations(couplings, log_mu, log_nu, iters) - norm


class SuperGlue(nn.Module):
    def __init__(self):
        super().__init__()
        self.kenc = MLP([3, 32, 64, DIM])
        self.layers = nn.ModuleList([AttentionalPropagation(DIM, 4) for _ in range(4)])
        self.names = ['self', 'cross'] * 2
        self.final_proj = nn.Conv1d(DIM, DIM, kernel_size=1, bias=True)
        self.register_parameter('bin_score', torch.nn.Parameter(torch.tensor([1.])))

    def forward(self, kpts0, kpts1, scores0, scores1, desc0, desc1):
        desc0 = desc0 + self.kenc(torch.cat([kpts0.transpose(1, 2), scores0.unsqueeze(1)], dim=1))
        desc1 = desc1 + self.kenc(torch.cat([kpts1.transpose(1, 2), scores1.unsqueeze(1)], dim=1))
        for layer, name in zip(self.layers, self.names):
            src0, src1 = (desc1, desc0) if name == 'cross' else (desc0, desc1)
            desc0, desc1 = desc0 + layer(desc0, src0), desc1 + layer(desc1, src1)
        scores = torch.einsum('bdn,bdm->bnm', self.final_proj(desc0), self.final_proj(desc1)) / DIM ** .5
        return log_optimal_transport(scores, self.bin_score, iters=20)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.net = SuperGlue()
        load_params(NAME, self.net)
        self.model = compile(self.net)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-4)

    def step(self) -> float:
        r = self.r
        k0 = r.uniform(-1, 1, (BATCH, N0, 2))
        k1 = r.uniform(-1, 1, (BATCH, N1, 2))
        d0 = r.standard_normal((BATCH, DIM, N0))
        d1 = r.standard_normal((BATCH, DIM, N1))
        gt0 = np.full((BATCH, N0), N1)
        gt1 = np.full((BATCH, N1), N0)
        for b in range(BATCH):
            j = r.permutation(N1)[:MATCHES]
            k1[b, j] = k0[b, :MATCHES] + 0.01 * r.standard_normal((MATCHES, 2))
            d1[b, :, j] = d0[b, :, :MATCHES].T + 0.3 * r.standard_normal((MATCHES, DIM))
            gt0[b, :MATCHES], gt1[b, j] = j, np.arange(MATCHES)
        f = lambda a: torch.from_numpy(a.astype(np.float32))
        Z = self.model(f(k0), f(k1), f(r.uniform(0, 1, (BATCH, N0))), f(r.uniform(0, 1, (BATCH, N1))), f(d0), f(d1))
        gt0, gt1 = torch.from_numpy(gt0), torch.from_numpy(gt1)
        rows = torch.arange(BATCH)[:, None]
        matched = gt0 < N1
        loss = -(Z[rows, torch.arange(N0), gt0][matched].sum() + Z[rows, torch.arange(N0), N1][~matched].sum()
                 + Z[rows, N0, torch.arange(N1)][gt1 == N0].sum()) / (BATCH * (N0 + N1))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
