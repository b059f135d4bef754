"""An RNN-Transducer (Graves 2012; the "Sequence-to-sequence learning with Transducers"
tutorial) with its loss as the tutorial's dynamic program.

Encoder: a bidirectional LSTM of 64 over 20 frames of 16 features and a Linear. Predictor:
Embedding (blank 0 as padding) and an LSTM over the blank-prefixed labels (up to 6). Joint:
(B, T, 1, H) + (B, 1, U+1, H), ReLU, Linear to 16 symbols, log_softmax. Loss: log_alpha
written cell by cell in place over the (T, U+1) lattice (logsumexp of stacked arcs, gather
of the label's log-probability), the final cells read per utterance; batch 8 of varying
lengths, Adam. Compiled: the model and the loss function.
"""
import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "rnnt"
BATCH, T_MAX, U_MAX, FEATS, SYMBOLS, HIDDEN = 8, 20, 6, 16, 16, 64


class Transducer(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.LSTM(FEATS, HIDDEN, batch_first=True, bidirectional=True)
        self.enc_out = nn.Linear(2 * HIDDEN, HIDDEN)
        self.embed = nn.Embedding(SYMBOLS, HIDDEN, padding_idx=0)
        self.pred = nn.LSTM(HIDDEN, HIDDEN, batch_first=True)
        self.pred_out = nn.Linear(HIDDEN, HIDDEN)
        self.joint = nn.Linear(HIDDEN, SYMBOLS)

    def forward(self, x, y):
        enc = self.enc_out(self.enc(x)[0])
        y = torch.cat([torch.zeros(y.shape[0], 1, dtype=torch.long), y], 1)
        pred = self.pred_out(self.pred(self.embed(y))[0])
        return self.joint(torch.relu(enc.unsqueeze(2) + pred.unsqueeze(1))).log_softmax(-1)


def compute_forward_prob(joiner_out, T, U, y):
    B, T_max, U_max = joiner_out.shape[0], joiner_out.shape[1], joiner_out.shape[2] - 1
    log_alpha = torch.zeros(B, T_max, U_max + 1)
    for t in range(T_max):
        for u in range(U_max + 1):
            if u == 0:
                if t > 0:
                    log_alpha[:, t, u] = log_alpha[:, t - 1, u] + joiner_out[:, t - 1, 0, 0]
            else:
                emit = torch.gather(joiner_out[:, t, u - 1], dim=1, index=y[:, u - 1].view(-1, 1)).reshape(-1)
                if t == 0:
                    log_alpha[:, t, u] = log_alpha[:, t, u - 1] + emit
                else:
                    log_alpha[:, t, u] = torch.logsumexp(torch.stack([
                        log_alpha[:, t - 1, u] + joiner_out[:, t - 1, u, 0], log_alpha[:, t, u - 1] + emit]), dim=0)
    return torch.stack([log_alpha[b, T[b] - 1, U[b]] + joiner_out[b, T[b] - 1, U[b], 0] for b in range(B)])


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = Transducer()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.forward_prob = compile(compute_forward_prob)

    def step(self) -> float:
        T = self.r.integers(T_MAX - 4, T_MAX + 1, BATCH)
        U = self.r.integers(1, U_MAX + 1, BATCH)
        x = self.r.standard_normal((BATCH, T_MAX, FEATS)).astype(np.float32)
        y = np.zeros((BATCH, U_MAX), np.int64)
        for b in range(BATCH):
            y[b, :U[b]] = self.r.integers(1, SYMBOLS, U[b])
            x[b, T[b]:] = 0
        y = torch.from_numpy(y)
        loss = -self.forward_prob(self.forward(torch.from_numpy(x), y), torch.from_numpy(T),
                                  torch.from_numpy(U), y).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
