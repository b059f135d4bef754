"""Point Transformer (Zhao et al.) classifying point clouds, as the Point-Transformers
repository's classifier writes it.

Batch 8 clouds of 256 points; kNN (16) by ``topk(largest=False)`` on ``cdist``,
neighbours gathered by index, vector self-attention whose weights come from an MLP over
``q_i - k_j + delta(p_i - p_j)``, softmax over the neighbours; two transition-downs by
farthest point sampling (a Python loop) and max over kNN groups of 1x1 Conv2d +
BatchNorm2d; label-smoothed cross-entropy, Adam. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "ptrans"
BATCH, POINTS, CLASSES, K = 8, 256, 10, 16


def index_points(points, idx):
    raw_size = idx.size()
    idx = idx.reshape(raw_size[0], -1)
    res = torch.gather(points, 1, idx[..., None].expand(-1, -1, points.size(-1)))
    return res.reshape(*raw_size, -1)


def farthest_point_sample(xyz, npoint):
    B, N, C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.ones(B, N) * 1e10
    farthest = torch.zeros(B, dtype=torch.long)
    batch_indices = torch.arange(B, dtype=torch.long)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        distance = torch.min(distance, dist)
        farthest = torch.max(distance, -1)[1]
    return centroids


class TransformerBlock(nn.Module):
    def __init__(self, d_points, d_model, k):
        super().__init__()
        self.fc1 = nn.Linear(d_points, d_model)
        self.fc2 = nn.Linear(d_model, d_points)
        self.fc_delta = nn.Sequential(nn.Linear(3, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.fc_gamma = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.w_qs = nn.Linear(d_model, d_model, bias=False)
        self.w_ks = nn.Linear(d_model, d_model, bias=False)
        self.w_vs = nn.Linear(d_model, d_model, bias=False)
        self.k = k

    def forward(self, xyz, features):
        knn_idx = torch.cdist(xyz, xyz).topk(self.k, dim=-1, largest=False)[1]
        knn_xyz = index_points(xyz, knn_idx)
        x = self.fc1(features)
        q, k, v = self.w_qs(x), index_points(self.w_ks(x), knn_idx), index_points(self.w_vs(x), knn_idx)
        pos_enc = self.fc_delta(xyz[:, :, None] - knn_xyz)
        attn = self.fc_gamma(q[:, :, None] - k + pos_enc)
        attn = F.softmax(attn / np.sqrt(k.size(-1)), dim=-2)
        res = torch.einsum('bmnf,bmnf->bmf', attn, v + pos_enc)
        return self.fc2(res) + features


class TransitionDown(nn.Module):
    def __init__(self, npoint, nneighbor, channels):
        super().__init__()
        self.npoint, self.nneighbor = npoint, nneighbor
        layers, last = [], channels[0]
        for out_channel in channels[1:]:
            layers += [nn.Conv2d(last, out_channel, 1), nn.BatchNorm2d(out_channel), nn.ReLU()]
            last = out_channel
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, points):
        new_xyz = index_points(xyz, farthest_point_sample(xyz, self.npoint))
        idx = torch.sum((new_xyz[:, :, None] - xyz[:, None]) ** 2, -1).argsort()[:, :, :self.nneighbor]
        grouped = index_points(xyz, idx) - new_xyz.view(xyz.size(0), self.npoint, 1, 3)
        new_points = self.mlp(torch.cat([grouped, index_points(points, idx)], dim=-1).permute(0, 3, 2, 1))
        return new_xyz, torch.max(new_points, 2)[0].transpose(1, 2)


class PointTransformerCls(nn.Module):
    def __init__(self, nblocks=3, d_model=64):
        super().__init__()
        self.fc1 = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 32))
        self.transformer1 = TransformerBlock(32, d_model, K)
        self.transition_downs, self.transformers = nn.ModuleList(), nn.ModuleList()
        for i in range(nblocks - 1):
            channel = 32 * 2 ** (i + 1)
            self.transition_downs.append(TransitionDown(POINTS // 4 ** (i + 1), K, [channel // 2 + 3, channel, channel]))
            self.transformers.append(TransformerBlock(channel, d_model, K))
        self.fc2 = nn.Sequential(nn.Linear(32 * 2 ** (nblocks - 1), 64), nn.ReLU(), nn.Linear(64, CLASSES))

    def forward(self, x):
        xyz = x[..., :3]
        points = self.transformer1(xyz, self.fc1(x))
        for down, block in zip(self.transition_downs, self.transformers):
            xyz, points = down(xyz, points)
            points = block(xyz, points)
        return self.fc2(points.mean(1))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = PointTransformerCls()
        load_params(NAME, self.model)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, weight_decay=1e-4)
        self.forward = compile(self.model)

    def step(self) -> float:
        self.model.train()
        pts = self.r.standard_normal((BATCH, POINTS, 3)).astype(np.float32)
        pts /= np.linalg.norm(pts, axis=2, keepdims=True)
        target = torch.from_numpy(self.r.integers(0, CLASSES, BATCH))
        self.optimizer.zero_grad()
        loss = self.criterion(self.forward(torch.from_numpy(pts)), target)
        loss.backward()
        self.optimizer.step()
        return loss.item()
