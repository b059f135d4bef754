"""Growing neural cellular automata (Mordvintsev et al. 2020) as its PyTorch ports write it.

16 channels on a 32x32 grid: identity and Sobel perception kernels repeated per channel
and applied by ``F.conv2d(groups=16)``, a 1x1-conv update net (48 -> 96 -> 16), alive
masking by ``max_pool2d`` of the alpha channel, an update mask ``rand < rate`` (the rate a
0/1 checkerboard from numpy: the frameworks' generators differ); 32 unrolled steps of a
batch of 8 from a sample pool, MSE to an RGBA target, each gradient divided by its norm,
Adam. Compiled: one CA step (the loop calls it 32 times).
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "nca"
CHANNELS, HIDDEN, SIZE, BATCH, STEPS = 16, 96, 32, 8, 32


class CAModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Conv2d(CHANNELS * 3, HIDDEN, 1)
        self.fc1 = nn.Conv2d(HIDDEN, CHANNELS, 1, bias=False)
        ident = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
        sobel_x = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
        kernel = torch.stack([ident, sobel_x, sobel_x.T])[:, None]
        self.register_buffer("kernel", kernel.repeat(CHANNELS, 1, 1, 1))

    def alive(self, x):
        return F.max_pool2d(x[:, 3:4], kernel_size=3, stride=1, padding=1) > 0.1

    def forward(self, x, fire_rate):
        pre = self.alive(x)
        y = F.conv2d(x, self.kernel, padding=1, groups=CHANNELS)
        dx = self.fc1(F.relu(self.fc0(y)))
        x = x + dx * (torch.rand(x[:, :1].shape) < fire_rate).float()
        return x * (pre & self.alive(x)).float()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = CAModel()
        load_params(NAME, self.model)
        with torch.no_grad():
            self.model.fc1.weight.mul_(0.1)
        self.step_fn = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=2e-3)
        yy, xx = np.mgrid[:SIZE, :SIZE] - (SIZE - 1) / 2
        disk = (np.hypot(yy, xx) < SIZE / 3).astype(np.float32)
        self.target = torch.from_numpy(np.stack([disk * (xx > 0), disk * 0.5, disk * (yy > 0), disk])[None])
        board = ((yy + xx + SIZE) % 2 == 0).astype(np.float32)[None, None]
        self.boards = (torch.from_numpy(board), torch.from_numpy(1 - board))
        seed = np.zeros((64, CHANNELS, SIZE, SIZE), np.float32)
        seed[:, 3:, SIZE // 2 - 2:SIZE // 2 + 2, SIZE // 2 - 2:SIZE // 2 + 2] = 1.0
        self.pool = torch.from_numpy(seed)

    def step(self) -> float:
        idx = self.r.choice(len(self.pool), BATCH, replace=False)
        x = self.pool[idx]
        for t in range(STEPS):
            x = self.step_fn(x, self.boards[t % 2])
        loss = F.mse_loss(x[:, :4], self.target.expand(BATCH, -1, -1, -1))
        self.optimizer.zero_grad()
        loss.backward()
        for p in self.model.parameters():
            p.grad.data = p.grad.data / (p.grad.data.norm() + 1e-8)
        self.optimizer.step()
        self.pool[idx] = x.detach()
        return loss.item()
