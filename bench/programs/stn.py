"""The spatial transformer network tutorial's training step (PyTorch tutorials,
spatial_transformer_tutorial.py).

A localization CNN regresses an affine theta per image (its last layer starting at the
identity, nudged), ``F.affine_grid`` and ``F.grid_sample`` warp the 28x28 input, then the
tutorial's classifier: two convs with max-pooling, two linears, ``log_softmax``,
``nll_loss``, SGD(0.01). Batch 64 of MNIST-shaped images from numpy; dropout left out.
Compiled: the network.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "stn"
BATCH = 64


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(True), nn.Linear(32, 3 * 2))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.random((BATCH, 1, 28, 28), dtype=np.float32)),
                         torch.from_numpy(r.integers(0, 10, BATCH))) for _ in range(4)]
        self.model = Net()
        load_params(NAME, self.model)
        with torch.no_grad():   # the tutorial's identity start, nudged so the warp moves pixels
            self.model.fc_loc[2].weight.mul_(0.1)
            self.model.fc_loc[2].bias.copy_(torch.tensor([1.0, 0.1, 0.05, -0.1, 1.0, 0.0]))
        self.forward = compile(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.i = 0

    def step(self) -> float:
        data, target = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        loss = F.nll_loss(self.forward(data), target)
        loss.backward()
        self.optimizer.step()
        return loss.item()
