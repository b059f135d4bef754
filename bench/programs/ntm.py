"""A Neural Turing Machine on the copy task, as pytorch-ntm writes it.

pytorch-ntm's copy-task sizes (an LSTM controller of 100, a memory of 128 x 20, 8-bit
sequences) at batch 8 and sequences of 5 to 10 vectors: each step feeds the sequence and
its delimiter, then reads as many outputs, one compiled NTM step per vector (a Python
loop of 11 to 21 steps). A step: content addressing by cosine similarity and a softmax,
interpolation with the last weighting, a circular shift by ``F.conv1d`` on a wrapped
copy of each batch row (a Python loop over the batch), sharpening, an erase-then-add
write and a read by outer products. BCELoss, gradients clamped by value, RMSprop with
momentum. Compiled: the NTM step.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "ntm"
BATCH, WIDTH, CONTROLLER, N, M = 8, 8, 100, 128, 20


def _convolve(w, s):
    t = torch.cat([w[-1:], w, w[:1]])
    return F.conv1d(t.view(1, 1, -1), s.view(1, 1, -1)).view(-1)


class NTMHead(nn.Module):
    def __init__(self, is_read):
        super().__init__()
        self.is_read = is_read
        self.lengths = [M, 1, 1, 3, 1] + ([] if is_read else [M, M])
        self.fc = nn.Linear(CONTROLLER, sum(self.lengths))

    def forward(self, memory, h, w_prev):
        k, beta, g, s, gamma, *ea = torch.split(self.fc(h), self.lengths, dim=1)
        beta, g, s, gamma = F.softplus(beta), torch.sigmoid(g), F.softmax(s, dim=1), 1 + F.softplus(gamma)
        sim = F.cosine_similarity(memory + 1e-16, k.unsqueeze(1) + 1e-16, dim=-1)
        wg = g * F.softmax(beta * sim, dim=1) + (1 - g) * w_prev
        shifted = torch.zeros(wg.size())
        for b in range(wg.size(0)):
            shifted[b] = _convolve(wg[b], s[b])
        w = shifted ** gamma
        w = torch.div(w, torch.sum(w, dim=1).view(-1, 1) + 1e-16)
        if self.is_read:
            return torch.matmul(w.unsqueeze(1), memory).squeeze(1), w, memory
        e, a = torch.sigmoid(ea[0]), ea[1]
        erase = torch.matmul(w.unsqueeze(-1), e.unsqueeze(1))
        add = torch.matmul(w.unsqueeze(-1), a.unsqueeze(1))
        return None, w, memory * (1 - erase) + add


class NTMCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mem_bias", torch.zeros(N, M))
        self.controller = nn.LSTMCell(WIDTH + 1 + M, CONTROLLER)
        self.read_head, self.write_head = NTMHead(True), NTMHead(False)
        self.fc = nn.Linear(CONTROLLER + M, WIDTH)

    def forward(self, x, prev_state):
        memory, prev_read, (h, c), w_read, w_write = prev_state
        h, c = self.controller(torch.cat([x, prev_read], dim=1), (h, c))
        _, w_write, memory = self.write_head(memory, h, w_write)
        read, w_read, _ = self.read_head(memory, h, w_read)
        o = torch.sigmoid(self.fc(torch.cat([h, read], dim=1)))
        return o, (memory, read, (h, c), w_read, w_write)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.cell = NTMCell()
        load_params(NAME, self.cell)
        with torch.no_grad():
            stdev = 1 / np.sqrt(N + M)
            self.cell.mem_bias.copy_(torch.from_numpy(self.r.uniform(-stdev, stdev, (N, M)).astype(np.float32)))
        self.step_fn = compile(self.cell)
        self.criterion = nn.BCELoss()
        self.optimizer = torch.optim.RMSprop(self.cell.parameters(), momentum=0.9, alpha=0.95, lr=1e-4)

    def init_sequence(self):
        z = lambda *s: torch.zeros(*s)   # noqa: E731
        return (self.cell.mem_bias.clone().repeat(BATCH, 1, 1), z(BATCH, M), (z(BATCH, CONTROLLER),
                z(BATCH, CONTROLLER)), z(BATCH, N), z(BATCH, N))

    def step(self) -> float:
        seq_len = int(self.r.integers(5, 11))
        seq = torch.from_numpy(self.r.binomial(1, 0.5, (seq_len, BATCH, WIDTH)).astype(np.float32))
        inp = torch.zeros(seq_len + 1, BATCH, WIDTH + 1)
        inp[:seq_len, :, :WIDTH] = seq
        inp[seq_len, :, WIDTH] = 1.0
        self.optimizer.zero_grad()
        state = self.init_sequence()
        for i in range(seq_len + 1):
            _, state = self.step_fn(inp[i], state)
        y_out = torch.zeros(seq.size())
        for i in range(seq_len):
            y_out[i], state = self.step_fn(torch.zeros(BATCH, WIDTH + 1), state)
        loss = self.criterion(y_out, seq)
        loss.backward()
        for p in self.cell.parameters():
            p.grad.data.clamp_(-10, 10)
        self.optimizer.step()
        return loss.item()
