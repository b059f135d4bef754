"""torchvision's R(2+1)D video classifier (models/video/resnet.py), lite.

Each 3x3x3 convolution factored into a spatial (1,3,3) and a temporal (3,1,1) Conv3d with
a BatchNorm3d between; a stem of (1,7,7)/(3,1,1) convs and a (1,3,3) MaxPool3d, three
basic residual stages (widths 16-64, strided 1x1x1 downsamples), AdaptiveAvgPool3d.
Clips of 8 frames of 56x56, batch 4, from (N, T, H, W, C) uint8 frames permuted and
normalised; cross-entropy with label smoothing, SGD with momentum. Compiled: the model.
"""
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "r2plus1d"
BATCH, FRAMES, SIZE, CLASSES = 4, 8, 56, 10


def conv2plus1d(cin, cout, stride=1):
    mid = (cin * cout * 27) // (cin * 9 + 3 * cout)
    return nn.Sequential(
        nn.Conv3d(cin, mid, kernel_size=(1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False),
        nn.BatchNorm3d(mid), nn.ReLU(inplace=True),
        nn.Conv3d(mid, cout, kernel_size=(3, 1, 1), stride=(stride, 1, 1), padding=(1, 0, 0), bias=False))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Sequential(conv2plus1d(cin, cout, stride), nn.BatchNorm3d(cout), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv2plus1d(cout, cout), nn.BatchNorm3d(cout))
        self.downsample = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv3d(cin, cout, kernel_size=1, stride=stride, bias=False), nn.BatchNorm3d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        residual = x if self.downsample is None else self.downsample(x)
        out = self.conv2(self.conv1(x))
        out += residual
        return self.relu(out)


class R2Plus1D(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(OrderedDict([
            ("conv_s", nn.Conv3d(3, 24, (1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bias=False)),
            ("bn_s", nn.BatchNorm3d(24)), ("relu_s", nn.ReLU(inplace=True)),
            ("conv_t", nn.Conv3d(24, 16, (3, 1, 1), padding=(1, 0, 0), bias=False)),
            ("bn_t", nn.BatchNorm3d(16)), ("relu_t", nn.ReLU(inplace=True)),
            ("pool", nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)))]))
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2)
        self.layer3 = BasicBlock(32, 64, stride=2)
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(64, CLASSES)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(self.avgpool(x).flatten(1))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        mean = torch.tensor([0.43216, 0.394666, 0.37645]).view(1, 3, 1, 1, 1)
        std = torch.tensor([0.22803, 0.22145, 0.216989]).view(1, 3, 1, 1, 1)
        self.batches = []
        for _ in range(4):
            frames = torch.from_numpy(r.integers(0, 256, (BATCH, FRAMES, SIZE, SIZE, 3), dtype=np.uint8))
            x = (frames.permute(0, 4, 1, 2, 3).float().div_(255.0) - mean) / std
            self.batches.append((x, torch.from_numpy(r.integers(0, CLASSES, BATCH))))
        self.model = R2Plus1D()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        loss = F.cross_entropy(self.forward(x), y, label_smoothing=0.1)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
