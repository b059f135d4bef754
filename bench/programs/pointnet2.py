"""PointNet++ SSG (Qi et al.) classifying point clouds, as Pointnet_Pointnet2_pytorch writes it.

Batch 16 clouds of 512 points; two set abstractions (64 centroids, radius 0.2, 16
neighbours; 16 centroids, radius 0.4, 16 neighbours) and a group-all layer: farthest point
sampling as a Python loop of masked writes and ``torch.max`` over running distances, ball
query by writing N into an ``arange`` where the squared distance exceeds the radius,
``sort`` and padding with each group's first index, neighbourhoods gathered by batch-index
advanced indexing; shared MLPs of 1x1 Conv2d + BatchNorm2d + ReLU, max over the neighbours,
a BatchNorm'd MLP head, ``nll_loss`` on ``log_softmax``, Adam. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "pointnet2"
BATCH, POINTS, CLASSES = 16, 512, 10


def square_distance(src, dst):
    B, N, _ = src.shape
    _, M, _ = dst.shape
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src ** 2, -1).view(B, N, 1)
    dist += torch.sum(dst ** 2, -1).view(B, 1, M)
    return dist


def index_points(points, idx):
    B = points.shape[0]
    view_shape = [B] + [1] * (idx.dim() - 1)
    repeat_shape = [1] + list(idx.shape[1:])
    batch_indices = torch.arange(B, dtype=torch.long).view(view_shape).repeat(repeat_shape)
    return points[batch_indices, idx, :]


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
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius, nsample, xyz, new_xyz):
    B, N, C = xyz.shape
    _, S, _ = new_xyz.shape
    group_idx = torch.arange(N, dtype=torch.long).view(1, 1, N).repeat([B, S, 1])
    group_idx[square_distance(new_xyz, xyz) > radius ** 2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]
    return group_idx


class SetAbstraction(nn.Module):
    def __init__(self, npoint, radius, nsample, in_channel, mlp):
        super().__init__()
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        self.mlp_convs, self.mlp_bns = nn.ModuleList(), nn.ModuleList()
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv2d(in_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out_channel))
            in_channel = out_channel

    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        points = points.permute(0, 2, 1) if points is not None else None
        B, N, C = xyz.shape
        if self.npoint is None:   # group all
            new_xyz = torch.zeros(B, 1, C)
            new_points = torch.cat([xyz.view(B, 1, N, C), points.view(B, 1, N, -1)], dim=-1)
        else:
            new_xyz = index_points(xyz, farthest_point_sample(xyz, self.npoint))
            idx = query_ball_point(self.radius, self.nsample, xyz, new_xyz)
            new_points = index_points(xyz, idx) - new_xyz.view(B, self.npoint, 1, C)
            if points is not None:
                new_points = torch.cat([new_points, index_points(points, idx)], dim=-1)
        new_points = new_points.permute(0, 3, 2, 1)
        for conv, bn in zip(self.mlp_convs, self.mlp_bns):
            new_points = F.relu(bn(conv(new_points)))
        return new_xyz.permute(0, 2, 1), torch.max(new_points, 2)[0]


class PointNet2(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa1 = SetAbstraction(64, 0.2, 16, 3, [32, 32, 64])
        self.sa2 = SetAbstraction(16, 0.4, 16, 64 + 3, [64, 64, 128])
        self.sa3 = SetAbstraction(None, None, None, 128 + 3, [128, 256])
        self.fc1, self.bn1 = nn.Linear(256, 128), nn.BatchNorm1d(128)
        self.fc2 = nn.Linear(128, CLASSES)

    def forward(self, xyz):
        l1_xyz, l1_points = self.sa1(xyz, None)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        _, l3_points = self.sa3(l2_xyz, l2_points)
        x = F.relu(self.bn1(self.fc1(l3_points.view(xyz.shape[0], 256))))
        return F.log_softmax(self.fc2(x), -1)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = PointNet2()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, weight_decay=1e-4)
        self.forward = compile(self.model)

    def step(self) -> float:
        self.model.train()
        pts = self.r.standard_normal((BATCH, POINTS, 3)).astype(np.float32)
        pts *= self.r.uniform(0.5, 1.0, (BATCH, 1, 3)).astype(np.float32) / np.linalg.norm(pts, axis=2, keepdims=True)
        target = torch.from_numpy(self.r.integers(0, CLASSES, BATCH))
        self.optimizer.zero_grad()
        loss = F.nll_loss(self.forward(torch.from_numpy(pts).transpose(2, 1)), target)
        loss.backward()
        self.optimizer.step()
        return loss.item()
