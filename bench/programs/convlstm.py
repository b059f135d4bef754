"""A ConvLSTM encoder-forecaster for video prediction (Shi et al. 2015), as the
ConvLSTM_pytorch repository writes the cell.

Gates by one 3x3 conv over ``torch.cat([x, h])`` split four ways, two stacked cells in an
``nn.ModuleList``, Python loops over 6 input and 4 predicted frames (the forecaster fed
its own output), a strided conv in and a ConvTranspose2d out; moving squares of 64x64,
batch 8; MSE, Adam with clip_grad_norm_. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "convlstm"
BATCH, SIZE, T_IN, T_OUT, HIDDEN = 8, 64, 6, 4, 32


class ConvLSTMCell(nn.Module):
    def __init__(self, input_dim, hidden_dim, kernel_size=(3, 3)):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.conv = nn.Conv2d(input_dim + hidden_dim, 4 * hidden_dim, kernel_size,
                              padding=(kernel_size[0] // 2, kernel_size[1] // 2))

    def forward(self, x, state):
        h_cur, c_cur = state
        cc_i, cc_f, cc_o, cc_g = torch.split(self.conv(torch.cat([x, h_cur], dim=1)), self.hidden_dim, dim=1)
        c_next = torch.sigmoid(cc_f) * c_cur + torch.sigmoid(cc_i) * torch.tanh(cc_g)
        return torch.sigmoid(cc_o) * torch.tanh(c_next), c_next


class EncoderForecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.encoder = nn.ModuleList([ConvLSTMCell(16, HIDDEN), ConvLSTMCell(HIDDEN, HIDDEN)])
        self.forecaster = nn.ModuleList([ConvLSTMCell(16, HIDDEN), ConvLSTMCell(HIDDEN, HIDDEN)])
        self.up = nn.ConvTranspose2d(2 * HIDDEN, 16, 4, stride=2, padding=1)
        self.head = nn.Conv2d(16, 1, 1)

    def step(self, cells, x, states):
        h, new = F.leaky_relu(self.down(x), 0.2), []
        for cell, state in zip(cells, states):
            h, c = cell(h, state)
            new.append((h, c))
        return new

    def forward(self, frames, future):
        b, t, _, hh, ww = frames.size()
        zeros = frames.new_zeros(b, HIDDEN, hh // 2, ww // 2)
        states = [(zeros, zeros) for _ in self.encoder]
        for k in range(t):
            states = self.step(self.encoder, frames[:, k], states)
        x, outputs = frames[:, -1], []
        for _ in range(future):
            states = self.step(self.forecaster, x, states)
            x = torch.sigmoid(self.head(F.relu(self.up(torch.cat([h for h, _ in states], dim=1)))))
            outputs.append(x)
        return torch.stack(outputs, dim=1)


def moving_squares(r, n, t, side=12):
    seq = np.zeros((n, t, 1, SIZE, SIZE), np.float32)
    for i in range(n):
        (x, y), (dx, dy) = r.integers(0, SIZE - side, 2), r.choice([-3, 3], 2)
        for k in range(t):
            seq[i, k, 0, y:y + side, x:x + side] = 1.0
            dx = -dx if not 0 <= x + dx <= SIZE - side else dx
            dy = -dy if not 0 <= y + dy <= SIZE - side else dy
            x, y = x + dx, y + dy
    return torch.from_numpy(seq)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [moving_squares(r, BATCH, T_IN + T_OUT) for _ in range(4)]
        self.model = EncoderForecaster()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        seq = self.batches[self.i % len(self.batches)]
        self.i += 1
        loss = F.mse_loss(self.forward(seq[:, :T_IN], T_OUT), seq[:, T_IN:])
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
        self.optimizer.step()
        return loss.item()
