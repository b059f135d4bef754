"""Sub-pixel convolution super-resolution (Shi et al.), as pytorch/examples'
super_resolution writes it.

Four convolutions (5x5 to 64 channels, 3x3 to 64, to 32, to 9 = 3x3 sub-pixels) with
ReLU and ``nn.PixelShuffle(3)``: a 32x32 luminance crop to 96x96; MSELoss against the
high-resolution crop, Adam(lr 0.01), batch 8. Compiled: the model.
"""
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "superres"
UPSCALE, BATCH, SIZE = 3, 8, 32


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.input = torch.from_numpy(r.random((BATCH, 1, SIZE, SIZE), dtype="float32"))
        self.target = torch.from_numpy(r.random((BATCH, 1, SIZE * UPSCALE, SIZE * UPSCALE), dtype="float32"))
        self.model = Net(UPSCALE)
        load_params(NAME, self.model)
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.forward = compile(self.model)

    def step(self) -> float:
        self.optimizer.zero_grad()
        loss = self.criterion(self.forward(self.input), self.target)
        loss.backward()
        self.optimizer.step()
        return loss.item()
