"""Deformable convolution v2 written by hand (no CUDA op), on a small segmentation task.

A conv predicts 2*9 offsets and 9 sigmoid masks; sampling locations are the output grid
(``torch.meshgrid``) plus each tap's displacement plus its offset, normalized for
``F.grid_sample`` (bilinear, zeros, align_corners=True) once per tap, each sample scaled
by its mask, the taps mixed by ``einsum`` with an (out, in, 9) weight. A stem conv, two
deformable blocks with BatchNorm (one strided), bilinear upsampling and a 1x1 head on
48x48 single-channel images, batch 8, 3 classes under cross-entropy with an ignore
index; SGD with Nesterov momentum. Compiled: the network.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "dcnv2"
SIZE, BATCH = 48, 8


class DeformConv2d(nn.Module):
    def __init__(self, inc, outc, stride=1):
        super().__init__()
        self.stride = stride
        self.weight = nn.Parameter(torch.empty(outc, inc, 9))
        self.bias = nn.Parameter(torch.zeros(outc))
        self.p_conv = nn.Conv2d(inc, 18, 3, padding=1, stride=stride)
        self.m_conv = nn.Conv2d(inc, 9, 3, padding=1, stride=stride)

    def forward(self, x):
        b, c, h, w = x.shape
        offset = self.p_conv(x)
        mask = torch.sigmoid(self.m_conv(x))
        ho, wo = offset.shape[-2:]
        gy, gx = torch.meshgrid(torch.arange(ho, dtype=x.dtype) * self.stride,
                                torch.arange(wo, dtype=x.dtype) * self.stride, indexing="ij")
        r = torch.arange(-1, 2, dtype=x.dtype)
        ky, kx = [t.reshape(-1) for t in torch.meshgrid(r, r, indexing="ij")]
        samples = []
        for k in range(9):
            py = gy + ky[k] + offset[:, 2 * k]
            px = gx + kx[k] + offset[:, 2 * k + 1]
            grid = torch.stack([2 * px / (w - 1) - 1, 2 * py / (h - 1) - 1], dim=-1)
            s = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
            samples.append(s * mask[:, k:k + 1])
        out = torch.einsum("bckhw,ock->bohw", torch.stack(samples, 2), self.weight)
        return out + self.bias.view(1, -1, 1, 1)


class SegNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.dcn1, self.bn1 = DeformConv2d(16, 32, stride=2), nn.BatchNorm2d(32)
        self.dcn2, self.bn2 = DeformConv2d(32, 32), nn.BatchNorm2d(32)
        self.head = nn.Conv2d(48, 3, 1)

    def forward(self, x):
        f0 = self.stem(x)
        f1 = F.relu(self.bn1(self.dcn1(f0)))
        f1 = F.relu(self.bn2(self.dcn2(f1))) + f1
        up = F.interpolate(f1, size=f0.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([up, f0], 1))


def make_batch(r):
    img = r.normal(0, 0.3, (BATCH, 1, SIZE, SIZE)).astype(np.float32)
    lab = np.zeros((BATCH, SIZE, SIZE), np.int64)
    yy, xx = np.mgrid[:SIZE, :SIZE]
    for i in range(BATCH):
        cy, cx = r.integers(8, SIZE - 8, 2)
        rad = int(r.integers(3, 8))
        m = ((yy - cy) ** 2 + (xx - cx) ** 2 <= rad * rad) if i % 2 else ((abs(yy - cy) <= rad) & (abs(xx - cx) <= rad))
        lab[i][m] = 1 + i % 2
        img[i, 0][m] += 1.0
    lab[:, 0] = 255
    return torch.from_numpy(img), torch.from_numpy(lab)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [make_batch(r) for _ in range(4)]
        self.model = SegNet()
        load_params(NAME, self.model)
        with torch.no_grad():   # small offsets: a deformed, not scattered, sampling
            for dcn in (self.model.dcn1, self.model.dcn2):
                dcn.p_conv.weight.mul_(0.3)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.02, momentum=0.9, nesterov=True)
        self.criterion = nn.CrossEntropyLoss(ignore_index=255)
        self.i = 0

    def step(self) -> float:
        img, lab = self.batches[self.i % len(self.batches)]
        self.i += 1
        loss = self.criterion(self.forward(img), lab)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
