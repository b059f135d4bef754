"""DGCNN (Wang et al.) classifying point clouds, as its reference PyTorch code writes it.

Batch 8 clouds of 256 points; two EdgeConv layers: each point's 16 nearest neighbours by
``torch.cdist`` and ``topk`` (recomputed in feature space for the second layer), the
neighbours gathered by flat index arithmetic (``idx + arange(B) * N``, then indexing a
(B*N, C) view), edge features [x_j - x_i, x_i] through a 1x1 Conv2d + BatchNorm +
LeakyReLU(0.2) and a max over the neighbours; a 1x1 Conv1d to 128, global max and mean
pooling, an MLP head; label-smoothed cross entropy written by hand (``scatter``),
SGD with momentum and cosine annealing. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "dgcnn"
BATCH, POINTS, K, EMB, CLASSES = 8, 256, 16, 128, 10


def knn(x, k):
    d = torch.cdist(x.transpose(1, 2), x.transpose(1, 2))
    return d.topk(k, dim=-1, largest=False).indices


def get_graph_feature(x, k):
    batch_size, num_dims, num_points = x.size()
    idx = knn(x, k)
    idx_base = torch.arange(0, batch_size).view(-1, 1, 1) * num_points
    idx = (idx + idx_base).view(-1)
    x = x.transpose(2, 1).contiguous()
    feature = x.view(batch_size * num_points, -1)[idx, :]
    feature = feature.view(batch_size, num_points, k, num_dims)
    x = x.view(batch_size, num_points, 1, num_dims).repeat(1, 1, k, 1)
    return torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()


class DGCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(6, 32, kernel_size=1, bias=False), nn.BatchNorm2d(32),
                                   nn.LeakyReLU(negative_slope=0.2))
        self.conv2 = nn.Sequential(nn.Conv2d(64, 32, kernel_size=1, bias=False), nn.BatchNorm2d(32),
                                   nn.LeakyReLU(negative_slope=0.2))
        self.conv3 = nn.Sequential(nn.Conv1d(64, EMB, kernel_size=1, bias=False), nn.BatchNorm1d(EMB),
                                   nn.LeakyReLU(negative_slope=0.2))
        self.linear1 = nn.Linear(EMB * 2, 64, bias=False)
        self.bn6 = nn.BatchNorm1d(64)
        self.linear2 = nn.Linear(64, CLASSES)

    def forward(self, x):
        batch_size = x.size(0)
        x1 = self.conv1(get_graph_feature(x, K)).max(dim=-1, keepdim=False)[0]
        x2 = self.conv2(get_graph_feature(x1, K)).max(dim=-1, keepdim=False)[0]
        x = self.conv3(torch.cat((x1, x2), dim=1))
        a = F.adaptive_max_pool1d(x, 1).view(batch_size, -1)
        b = F.adaptive_avg_pool1d(x, 1).view(batch_size, -1)
        x = F.leaky_relu(self.bn6(self.linear1(torch.cat((a, b), 1))), negative_slope=0.2)
        return self.linear2(x)


def cal_loss(pred, gold, eps=0.2):
    gold = gold.contiguous().view(-1)
    n_class = pred.size(1)
    one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
    one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
    return -(one_hot * F.log_softmax(pred, dim=1)).sum(dim=1).mean()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = DGCNN()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, 250, eta_min=1e-3)
        self.forward = compile(self.model)

    def step(self) -> float:
        self.model.train()
        pts = self.r.standard_normal((BATCH, POINTS, 3)).astype(np.float32)
        pts *= self.r.uniform(0.5, 1.0, (BATCH, 1, 1)).astype(np.float32) / np.linalg.norm(pts, axis=2, keepdims=True)
        data = torch.from_numpy(pts).permute(0, 2, 1)
        label = torch.from_numpy(self.r.integers(0, CLASSES, (BATCH, 1)))
        loss = cal_loss(self.forward(data), label)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()
