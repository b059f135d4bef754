"""A Differentiable Neural Computer on a repeat-copy task (DeepMind's dnc addressing.py
and access.py ported to PyTorch).

An LSTMCell controller (width 64) and a 32-slot memory of 16-wide words with 2 read heads:
content addressing by cosine similarity and a sharpened softmax, allocation from the usage
sorted by ``torch.sort``, an exclusive ``cumprod`` and a ``scatter_`` back to memory order,
erase/add writes by outer products, a 32x32 temporal link matrix read forwards and
backwards by ``bmm``; the 20-step sequence unrolled by a Python loop in the forward; BCE
with logits on the answer phase, RMSprop, ``clip_grad_norm_``. Batch 16. Compiled: the DNC.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "dnc"
BATCH, BITS, LENGTH, HIDDEN, SLOTS, WORD, READS = 16, 6, 6, 64, 32, 16, 2


def content_weights(memory, keys, strengths):
    dot = torch.matmul(keys, memory.transpose(1, 2))
    norm = torch.matmul(torch.sqrt((keys * keys).sum(2, keepdim=True) + 1e-6),
                        torch.sqrt((memory * memory).sum(2, keepdim=True) + 1e-6).transpose(1, 2))
    return F.softmax(dot / (norm + 1e-6) * strengths.unsqueeze(-1), dim=-1)


def allocation(usage):
    usage = 1e-6 + (1 - 1e-6) * usage
    sorted_usage, indices = torch.sort(usage, dim=1)
    prod = torch.cumprod(sorted_usage, dim=1)
    prod = torch.cat([torch.ones_like(prod[:, :1]), prod[:, :-1]], dim=1)
    return torch.zeros_like(usage).scatter_(1, indices, (1 - sorted_usage) * prod)


class DNC(nn.Module):
    def __init__(self):
        super().__init__()
        self.sizes = [READS * WORD, READS, WORD, 1, WORD, WORD, READS, 1, 1, READS * 3]
        self.controller = nn.LSTMCell(BITS + 2 + READS * WORD, HIDDEN)
        self.interface = nn.Linear(HIDDEN, sum(self.sizes))
        self.output = nn.Linear(HIDDEN + READS * WORD, BITS)

    def forward(self, x):
        B = x.size(1)
        h = c = torch.zeros(B, HIDDEN)
        memory, usage = torch.zeros(B, SLOTS, WORD), torch.zeros(B, SLOTS)
        link, precedence = torch.zeros(B, SLOTS, SLOTS), torch.zeros(B, SLOTS)
        read_w, write_w, read_vec = torch.zeros(B, READS, SLOTS), torch.zeros(B, SLOTS), torch.zeros(B, READS * WORD)
        eye = torch.eye(SLOTS)
        outputs = []
        for t in range(x.size(0)):
            h, c = self.controller(torch.cat([x[t], read_vec], dim=1), (h, c))
            rk, rs, wk, ws, ev, wv, fg, ag, wg, rm = torch.split(self.interface(h), self.sizes, dim=1)
            usage = usage + (1 - usage) * write_w.detach()
            usage = usage * torch.prod(1 - torch.sigmoid(fg).unsqueeze(-1) * read_w, dim=1)
            ag, wg = torch.sigmoid(ag), torch.sigmoid(wg)
            wc = content_weights(memory, wk.view(B, 1, WORD), 1 + F.softplus(ws))[:, 0]
            write_w = wg * (ag * allocation(usage) + (1 - ag) * wc)
            memory = memory * (1 - torch.bmm(write_w.unsqueeze(2), torch.sigmoid(ev).unsqueeze(1))) \
                + torch.bmm(write_w.unsqueeze(2), wv.unsqueeze(1))
            link = ((1 - write_w.unsqueeze(2) - write_w.unsqueeze(1)) * link
                    + write_w.unsqueeze(2) * precedence.unsqueeze(1)) * (1 - eye)
            precedence = (1 - write_w.sum(1, keepdim=True)) * precedence + write_w
            mode = F.softmax(rm.view(B, READS, 3), dim=-1)
            content = content_weights(memory, rk.view(B, READS, WORD), 1 + F.softplus(rs))
            read_w = (mode[..., 0:1] * torch.bmm(read_w, link) + mode[..., 1:2] * content
                      + mode[..., 2:3] * torch.bmm(read_w, link.transpose(1, 2)))
            read_vec = torch.bmm(read_w, memory).reshape(B, -1)
            outputs.append(self.output(torch.cat([h, read_vec], dim=1)))
        return torch.stack(outputs)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        T = 2 * LENGTH + 1
        for _ in range(4):
            x = np.zeros((T, BATCH, BITS + 2), np.float32)
            y = np.zeros((T, BATCH, BITS), np.float32)
            pattern = r.integers(0, 2, (LENGTH, BATCH, BITS)).astype(np.float32)
            x[:LENGTH, :, :BITS] = pattern
            x[LENGTH, :, BITS] = 1
            y[LENGTH + 1:] = pattern
            mask = np.zeros((T, BATCH, 1), np.float32)
            mask[LENGTH + 1:] = 1
            self.batches.append(tuple(torch.from_numpy(a) for a in (x, y, mask)))
        self.model = DNC()
        load_params(NAME, self.model)
        self.net = compile(self.model)
        self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=1e-3, momentum=0.9, eps=1e-10)
        self.i = 0

    def step(self) -> float:
        x, y, mask = self.batches[self.i % len(self.batches)]
        self.i += 1
        logits = self.net(x)
        loss = (F.binary_cross_entropy_with_logits(logits, y, reduction='none') * mask).sum() / BATCH
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
        self.optimizer.step()
        return loss.item()
