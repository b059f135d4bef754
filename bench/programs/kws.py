"""Keyword spotting with the M5 network of the torchaudio speech-command tutorial, beside
log-magnitude STFT features.

One step is a batch of 64 one-second clips at 8 kHz (tones in noise, 10 classes). The
features: ``torch.stft`` (n_fft 256, hop 128, a Hann window kept as a buffer) and
``log(|X|^2 + 1e-6)``, computed outside the model as the tutorial applies its transform.
The model: M5 (Conv1d of 80 taps at stride 16, then three of 3 taps, 32-64 channels, each
BatchNorm1d, ReLU, MaxPool1d(4)), a Conv1d over the 129 frequency bins of the
spectrogram, global average pooling of both, a Linear and log_softmax; nll_loss, Adam
with weight decay. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "kws"
BATCH, SAMPLES, CLASSES, N_FFT, HOP = 64, 8000, 10, 256, 128


class LogSpectrogram(nn.Module):
    def __init__(self, n_fft, hop_length):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, hop_length=self.hop_length, window=self.window,
                          return_complex=True)
        return torch.log(spec.abs().pow(2) + 1e-6)


class M5(nn.Module):
    def __init__(self, n_input=1, n_output=CLASSES, stride=16, n_channel=32, n_freq=N_FFT // 2 + 1):
        super().__init__()
        self.conv1 = nn.Conv1d(n_input, n_channel, kernel_size=80, stride=stride)
        self.bn1 = nn.BatchNorm1d(n_channel)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(n_channel, n_channel, kernel_size=3)
        self.bn2 = nn.BatchNorm1d(n_channel)
        self.pool2 = nn.MaxPool1d(4)
        self.conv3 = nn.Conv1d(n_channel, 2 * n_channel, kernel_size=3)
        self.bn3 = nn.BatchNorm1d(2 * n_channel)
        self.pool3 = nn.MaxPool1d(4)
        self.conv4 = nn.Conv1d(2 * n_channel, 2 * n_channel, kernel_size=3)
        self.bn4 = nn.BatchNorm1d(2 * n_channel)
        self.pool4 = nn.MaxPool1d(4)
        self.spec = nn.Conv1d(n_freq, n_channel, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(3 * n_channel, n_output)

    def forward(self, x, spec):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = self.pool3(F.relu(self.bn3(self.conv3(x))))
        x = self.pool4(F.relu(self.bn4(self.conv4(x))))
        x = F.avg_pool1d(x, x.shape[-1]).squeeze(-1)
        s = F.relu(self.spec(spec)).mean(-1)
        return F.log_softmax(self.fc1(torch.cat([x, s], dim=1)), dim=1)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.transform = LogSpectrogram(N_FFT, HOP)
        self.model = M5()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01, weight_decay=0.0001)
        self.forward = compile(self.model)
        self.t = np.arange(SAMPLES) / SAMPLES

    def step(self) -> float:
        target = self.r.integers(0, CLASSES, BATCH)
        wav = np.sin(2 * math.pi * (100 + 150 * target[:, None]) * self.t)
        wav = wav + 0.3 * self.r.standard_normal((BATCH, SAMPLES))
        data = torch.from_numpy(wav.astype(np.float32)).unsqueeze(1)
        target = torch.from_numpy(target)
        self.model.train()
        output = self.forward(data, self.transform(data.squeeze(1)))
        loss = F.nll_loss(output, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
