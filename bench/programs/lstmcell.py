"""Sine-wave sequence prediction with two LSTMCells, as pytorch/examples'
time_sequence_prediction writes it (in double precision, as there).

``nn.LSTMCell(1, 51)``, ``nn.LSTMCell(51, 51)`` and a ``Linear(51, 1)`` stepped by a
Python loop over ``input.split(1, dim=1)``, the predictions concatenated, MSELoss over 97
sequences of 100 steps; Adam instead of the example's LBFGS so that one step is one
forward and backward. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "lstmcell"
HIDDEN, STEPS, SEQUENCES, PERIOD = 51, 100, 97, 20


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, HIDDEN)
        self.lstm2 = nn.LSTMCell(HIDDEN, HIDDEN)
        self.linear = nn.Linear(HIDDEN, 1)

    def forward(self, input):
        outputs = []
        h_t = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        c_t = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        x = np.arange(STEPS + 1) + r.integers(-4 * PERIOD, 4 * PERIOD, SEQUENCES).reshape(-1, 1)
        data = np.sin(x / PERIOD).astype(np.float64)
        self.input = torch.from_numpy(data[:, :-1].copy())
        self.target = torch.from_numpy(data[:, 1:].copy())
        self.seq = Sequence()
        self.seq.double()
        load_params(NAME, self.seq)
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.Adam(self.seq.parameters(), lr=0.01)
        self.forward = compile(self.seq)

    def step(self) -> float:
        self.optimizer.zero_grad()
        out = self.forward(self.input)
        loss = self.criterion(out, self.target)
        loss.backward()
        self.optimizer.step()
        return loss.item()
