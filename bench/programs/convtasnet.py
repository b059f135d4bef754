"""Conv-TasNet speech separation (kaituoxu/Conv-TasNet, asteroid) at small width.

Encoder: Conv1d(1, 64, 16, stride 8) and ReLU. Separator: channel-wise LayerNorm, a 1x1
bottleneck, two repeats of four temporal blocks (1x1 conv, PReLU, global LayerNorm by
mean/var over (1, 2) by hand, depthwise dilated Conv1d, PReLU, gLN, pointwise conv, a
residual), sigmoid masks for two sources. Decoder: ConvTranspose1d(64, 1, 16, stride 8).
Loss: negative SI-SNR under permutation-invariant training (itertools.permutations,
stacked losses, min). Batch 4 of 1 s at 8 kHz, Adam, gradient clipping. Compiled: the model.
"""
import itertools
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "convtasnet"
BATCH, SAMPLES, SOURCES = 4, 8000, 2
EPS = 1e-8


class GlobalLayerNorm(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, channels, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1))

    def forward(self, y):
        mean = y.mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)
        var = (torch.pow(y - mean, 2)).mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)
        return self.gamma * (y - mean) / torch.pow(var + EPS, 0.5) + self.beta


class ChannelwiseLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class TemporalBlock(nn.Module):
    def __init__(self, B, H, P, dilation):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(B, H, 1, bias=False), nn.PReLU(), GlobalLayerNorm(H),
            nn.Conv1d(H, H, P, padding=(P - 1) * dilation // 2, dilation=dilation, groups=H, bias=False),
            nn.PReLU(), GlobalLayerNorm(H), nn.Conv1d(H, B, 1, bias=False))

    def forward(self, x):
        return self.net(x) + x


class ConvTasNet(nn.Module):
    def __init__(self, N=64, L=16, B=64, H=128, P=3, X=4, R=2, C=SOURCES):
        super().__init__()
        self.C = C
        self.encoder = nn.Conv1d(1, N, L, stride=L // 2, bias=False)
        blocks = [TemporalBlock(B, H, P, 2 ** x) for _ in range(R) for x in range(X)]
        self.separator = nn.Sequential(ChannelwiseLayerNorm(N), nn.Conv1d(N, B, 1, bias=False), *blocks,
                                       nn.Conv1d(B, C * N, 1, bias=False))
        self.decoder = nn.ConvTranspose1d(N, 1, L, stride=L // 2, bias=False)

    def forward(self, mixture):
        w = F.relu(self.encoder(mixture.unsqueeze(1)))
        M, N, K = w.shape
        mask = torch.sigmoid(self.separator(w).view(M, self.C, N, K))
        est = self.decoder((w.unsqueeze(1) * mask).view(M * self.C, N, K)).view(M, self.C, -1)
        return F.pad(est, (0, mixture.shape[-1] - est.shape[-1]))


def si_snr(est, ref):
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    s_target = (est * ref).sum(-1, keepdim=True) * ref / (ref.pow(2).sum(-1, keepdim=True) + EPS)
    e_noise = est - s_target
    return 10 * torch.log10(s_target.pow(2).sum(-1) / (e_noise.pow(2).sum(-1) + EPS) + EPS)


def pit_loss(est, src):
    losses = [-si_snr(est[:, list(p)], src).mean(-1) for p in itertools.permutations(range(src.shape[1]))]
    return torch.stack(losses, 1).min(1)[0].mean()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = ConvTasNet()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.t = np.arange(SAMPLES) / SAMPLES

    def step(self) -> float:
        f = self.r.uniform(100, 1500, (BATCH, SOURCES, 1))
        src = np.sin(2 * math.pi * f * self.t) * self.r.uniform(0.3, 1.0, (BATCH, SOURCES, 1))
        src[:, 1] = np.sign(src[:, 1]) * np.abs(src[:, 1]) ** 0.5
        src = torch.from_numpy((src + 0.05 * self.r.standard_normal(src.shape)).astype(np.float32))
        loss = pit_loss(self.forward(src.sum(1)), src)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.optimizer.step()
        return loss.item()
