"""A multiresolution hash encoding fitted to a signed distance function (Instant-NGP's
encoding as HashNeRF-pytorch writes it, DeepSDF/IGR's losses).

8 levels from resolution 16 to 256, 2 features each, 2^14-row nn.Embedding tables; per level
the voxel's corner by ``floor(...).int()``, its 8 corners by a broadcast add, a spatial hash
XOR-ing int64 coordinates times large primes masked by ``& (T - 1)``, trilinear
interpolation by hand; a 3-layer Softplus(beta=100) MLP of width 64 on the features and the
coordinates. Batches of 4096 points near a box's surface and in its bounding cube; the loss
a clamped L1 to the true distance plus the eikonal term on ``autograd.grad(sdf, x,
create_graph=True)``, so each step differentiates the forward twice; Adam (eps 1e-15).
Compiled: the network. torch.compile cannot run it (UNSUPPORTED in __init__.py).
"""
import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "hashsdf"
POINTS, LEVELS, LOG2T, HIDDEN = 4096, 8, 14, 64
BOX_OFFSETS = torch.tensor([[[i, j, k] for i in [0, 1] for j in [0, 1] for k in [0, 1]]])
PRIMES = [1, 2654435761, 805459861]


def hash(coords, log2_hashmap_size):
    xor_result = torch.zeros_like(coords)[..., 0]
    for i in range(coords.shape[-1]):
        xor_result ^= coords[..., i] * PRIMES[i]
    return torch.tensor((1 << log2_hashmap_size) - 1) & xor_result


class SDFNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.resolutions = [int(16 * (256 / 16) ** (i / (LEVELS - 1))) for i in range(LEVELS)]
        self.embeddings = nn.ModuleList([nn.Embedding(2 ** LOG2T, 2) for _ in range(LEVELS)])
        dims = [3 + 2 * LEVELS, HIDDEN, HIDDEN, 1]
        self.lins = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(3)])
        self.activation = nn.Softplus(beta=100)

    def encode(self, x, level):
        grid_size = 2.0 / self.resolutions[level]
        bottom_left_idx = torch.floor((x.clamp(-1, 1) + 1) / grid_size).int()
        voxel_min_vertex = bottom_left_idx * grid_size - 1
        e = self.embeddings[level](hash(bottom_left_idx.unsqueeze(1) + BOX_OFFSETS, LOG2T))
        w = (x - voxel_min_vertex) / grid_size
        wx, wy, wz = w[:, 0:1], w[:, 1:2], w[:, 2:3]
        c00 = e[:, 0] * (1 - wx) + e[:, 4] * wx
        c01 = e[:, 1] * (1 - wx) + e[:, 5] * wx
        c10 = e[:, 2] * (1 - wx) + e[:, 6] * wx
        c11 = e[:, 3] * (1 - wx) + e[:, 7] * wx
        c0, c1 = c00 * (1 - wy) + c10 * wy, c01 * (1 - wy) + c11 * wy
        return c0 * (1 - wz) + c1 * wz

    def forward(self, x):
        h = torch.cat([x] + [self.encode(x, i) for i in range(LEVELS)], dim=-1)
        for i, lin in enumerate(self.lins):
            h = lin(h)
            if i < 2:
                h = self.activation(h)
        return h[:, 0]


def sdf_box(p, b=torch.tensor([0.5, 0.3, 0.4])):
    q = p.abs() - b
    return q.clamp(min=0).norm(dim=-1) + torch.clamp(q.max(dim=-1)[0], max=0)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            s = r.standard_normal((POINTS // 2, 3))
            s *= np.array([0.5, 0.3, 0.4]) / np.abs(s).max(1, keepdims=True)
            pts = np.concatenate([s + 0.02 * r.standard_normal(s.shape), r.uniform(-1, 1, (POINTS // 2, 3))])
            self.batches.append(torch.from_numpy(pts.astype(np.float32)))
        self.model = SDFNetwork()
        load_params(NAME, self.model)
        with torch.no_grad():
            for e in self.model.embeddings:
                e.weight.mul_(0.01)
        self.net = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, betas=(0.9, 0.99), eps=1e-15)
        self.i = 0

    def step(self) -> float:
        x = self.batches[self.i % len(self.batches)].clone().requires_grad_(True)
        self.i += 1
        gt = sdf_box(x.detach())
        sdf = self.net(x)
        loss_sdf = (torch.clamp(sdf, -0.1, 0.1) - torch.clamp(gt, -0.1, 0.1)).abs().mean()
        gradients = torch.autograd.grad(sdf, x, grad_outputs=torch.ones_like(sdf), create_graph=True)[0]
        loss = loss_sdf + 0.1 * ((gradients.norm(2, dim=-1) - 1) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
