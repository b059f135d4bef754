"""A DeepAR training step (the gluonts/pytorch-forecasting recipe) on count series.

A batch of 32 windows of synthetic weekly-seasonal count series: 48 context and 24
horizon steps, each input the lagged targets (1, 2, 7, 14 steps back, gathered by an
index tensor) divided by the window's context mean, calendar features by sin/cos, an
item embedding and the log scale; a 2-layer batch_first LSTM of width 40 teacher-forced
over the window, mu and the dispersion by softplus heads, and the loss the negative
``torch.distributions.NegativeBinomial`` log-likelihood (total_count 1/alpha, logits
log(alpha mu)); Adam, clip_grad_norm_. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import NegativeBinomial

from .common import load_params, rng

NAME = "deepar"
BATCH, CONTEXT, HORIZON, SERIES, HIDDEN = 32, 48, 24, 64, 40
LAGS = [1, 2, 7, 14]


class DeepAR(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(SERIES, 8)
        self.rnn = nn.LSTM(len(LAGS) + 2 + 8 + 1, HIDDEN, 2, batch_first=True)
        self.mu = nn.Linear(HIDDEN, 1)
        self.alpha = nn.Linear(HIDDEN, 1)

    def forward(self, lagged, feats, series, log_scale):
        t = lagged.shape[1]
        emb = self.embedding(series)[:, None].expand(-1, t, -1)
        x = torch.cat([lagged, feats, emb, log_scale[:, None, None].expand(-1, t, 1)], -1)
        out, _ = self.rnn(x)
        return F.softplus(self.mu(out)).squeeze(-1), F.softplus(self.alpha(out)).squeeze(-1) + 1e-4


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = DeepAR()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        t = np.arange(400)
        level = r.uniform(3, 30, (SERIES, 1))
        counts = r.poisson(level * (1 + 0.5 * np.sin(2 * np.pi * t / 7 + r.uniform(0, 6, (SERIES, 1))))).astype(np.float32)
        self.batches = []
        for _ in range(4):
            series = r.integers(0, SERIES, BATCH)
            starts = r.integers(max(LAGS), 400 - CONTEXT - HORIZON, BATCH)
            lo = starts - max(LAGS)
            window = np.stack([counts[s, a:a + max(LAGS) + CONTEXT + HORIZON] for s, a in zip(series, lo)])
            self.batches.append((torch.from_numpy(series), torch.from_numpy(window), torch.from_numpy(starts)))
        self.i = 0

    def step(self) -> float:
        series, window, t0 = self.batches[self.i % len(self.batches)]
        self.i += 1
        m, length = max(LAGS), CONTEXT + HORIZON
        scale = window[:, m:m + CONTEXT].mean(1) + 1.0
        idx = torch.arange(length)[None, :] + m - torch.tensor(LAGS)[:, None]
        lagged = window[:, idx].permute(0, 2, 1) / scale[:, None, None]
        tt = (torch.arange(length)[None, :] + t0[:, None]).float()
        feats = torch.stack([torch.sin(2 * np.pi * tt / 7), torch.cos(2 * np.pi * tt / 7)], -1)
        mu, alpha = self.forward(lagged, feats, series, scale.log())
        mu, alpha = mu * scale[:, None], alpha / scale[:, None].sqrt()
        dist = NegativeBinomial(total_count=1.0 / alpha, logits=torch.log(alpha * mu))
        loss = -dist.log_prob(window[:, m:m + length]).mean()
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
        self.optimizer.step()
        return loss.item()
