"""Demucs (v2) music source separation as facebookresearch/demucs trains it.

Four sources of stereo audio, batch 4, 1 s at 8 kHz cut to the model's valid length: four
encoders of a strided Conv1d (kernel 8, stride 4) + ReLU + 1x1 Conv1d + GLU from 16
channels doubling, a bidirectional LSTM over the bottleneck's frames (time-major by
permute), four decoders of a context-3 Conv1d + GLU + ConvTranspose1d whose skips are
center-trimmed to the shorter decoder input; the mix normalized by its mono std, the
FlipSign and Remix augmentations (argsort of noise, gather), an L1 loss on the
center-trimmed sources, Adam. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "demucs"
BATCH, SOURCES, CHANNELS, LENGTH = 4, 4, 2, 8000


def center_trim(tensor, reference):
    if hasattr(reference, "size"):
        reference = reference.size(-1)
    delta = tensor.size(-1) - reference
    if delta:
        tensor = tensor[..., delta // 2:-(delta - delta // 2)]
    return tensor


class BLSTM(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lstm = nn.LSTM(bidirectional=True, num_layers=1, hidden_size=dim, input_size=dim)
        self.linear = nn.Linear(2 * dim, dim)

    def forward(self, x):
        x = x.permute(2, 0, 1)
        x = self.lstm(x)[0]
        x = self.linear(x)
        return x.permute(1, 2, 0)


class Demucs(nn.Module):
    def __init__(self, sources=SOURCES, audio_channels=CHANNELS, channels=16, depth=4, context=3,
                 kernel_size=8, stride=4):
        super().__init__()
        self.sources, self.audio_channels = sources, audio_channels
        self.kernel_size, self.context, self.stride, self.depth = kernel_size, context, stride, depth
        self.encoder, self.decoder = nn.ModuleList(), nn.ModuleList()
        in_channels = audio_channels
        for index in range(depth):
            self.encoder.append(nn.Sequential(nn.Conv1d(in_channels, channels, kernel_size, stride), nn.ReLU(),
                                              nn.Conv1d(channels, 2 * channels, 1), nn.GLU(dim=1)))
            out_channels = in_channels if index > 0 else sources * audio_channels
            decode = [nn.Conv1d(channels, 2 * channels, context), nn.GLU(dim=1),
                      nn.ConvTranspose1d(channels, out_channels, kernel_size, stride)]
            if index > 0:
                decode.append(nn.ReLU())
            self.decoder.insert(0, nn.Sequential(*decode))
            in_channels, channels = channels, 2 * channels
        self.lstm = BLSTM(in_channels)

    def valid_length(self, length):
        for _ in range(self.depth):
            length = max(1, math.ceil((length - self.kernel_size) / self.stride) + 1) + self.context - 1
        for _ in range(self.depth):
            length = (length - 1) * self.stride + self.kernel_size
        return int(length)

    def forward(self, mix):
        mono = mix.mean(dim=1, keepdim=True)
        mean, std = mono.mean(dim=-1, keepdim=True), mono.std(dim=-1, keepdim=True)
        x = (mix - mean) / (1e-5 + std)
        saved = []
        for encode in self.encoder:
            x = encode(x)
            saved.append(x)
        x = self.lstm(x)
        for decode in self.decoder:
            x = decode(x + center_trim(saved.pop(-1), x))
        x = x * std + mean
        return x.view(x.size(0), self.sources, self.audio_channels, x.size(-1))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.net = Demucs()
        load_params(NAME, self.net)
        self.model = compile(self.net)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=3e-4)
        self.length = self.net.valid_length(LENGTH)

    def step(self) -> float:
        r = self.r
        t = np.arange(self.length) / 8000.0
        wav = np.sin(2 * np.pi * r.uniform(50, 800, (BATCH, SOURCES, 1, 1)) * t)
        wav = wav * r.uniform(0.2, 1.0, (BATCH, SOURCES, CHANNELS, 1)) + 0.05 * r.standard_normal(wav.shape[:3] + t.shape)
        sources = torch.from_numpy(wav.astype(np.float32))
        signs = torch.from_numpy(r.integers(0, 2, (BATCH, SOURCES, 1, 1)).astype(np.float32))
        sources = sources * (2 * signs - 1)                                  # FlipSign
        perm = torch.argsort(torch.from_numpy(r.random((BATCH, SOURCES, 1, 1))), dim=0)
        sources = sources.gather(0, perm.expand(-1, -1, CHANNELS, self.length))   # Remix
        estimates = self.model(sources.sum(dim=1))
        loss = F.l1_loss(estimates, center_trim(sources, estimates))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
