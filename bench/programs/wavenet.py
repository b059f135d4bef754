"""WaveNet (van den Oord et al.) as the popular PyTorch ports write it, on mu-law audio.

Batch 4 clips of 512 samples, mu-law quantized to 256 classes and one-hot encoded
(``F.one_hot``) as input channels; a causal Conv1d (padding, then slicing the tail off),
2 stacks of 6 dilated causal convs (dilation 1..32) with gated tanh * sigmoid units,
residual and skip 1x1 convs, the skips summed over ``torch.stack``; ReLU/1x1 head, cross
entropy over the 256 classes, Adam and ``clip_grad_value_``. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "wavenet"
BATCH, SAMPLES, CLASSES, LAYERS, STACKS, RES, SKIP = 4, 512, 256, 6, 2, 32, 64


def mu_law_encode(audio, quantization_channels=CLASSES):
    mu = quantization_channels - 1
    magnitude = torch.log1p(mu * torch.clamp(torch.abs(audio), max=1.0)) / math.log1p(mu)
    return ((torch.sign(audio) * magnitude + 1) / 2 * mu + 0.5).long()


class CausalConv1d(nn.Conv1d):
    def __init__(self, in_channels, out_channels, kernel_size, dilation=1):
        super().__init__(in_channels, out_channels, kernel_size, padding=(kernel_size - 1) * dilation,
                         dilation=dilation)
        self.chomp = (kernel_size - 1) * dilation

    def forward(self, input):
        return super().forward(input)[:, :, :-self.chomp]


class ResidualBlock(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.dilated = CausalConv1d(RES, 2 * RES, kernel_size=2, dilation=dilation)
        self.conv_res = nn.Conv1d(RES, RES, 1)
        self.conv_skip = nn.Conv1d(RES, SKIP, 1)

    def forward(self, x, skip_size):
        filt, gate = self.dilated(x).chunk(2, dim=1)
        gated = torch.tanh(filt) * torch.sigmoid(gate)
        output = self.conv_res(gated)
        output += x[:, :, -output.size(2):]
        return output, self.conv_skip(gated)[:, :, -skip_size:]


class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.receptive_fields = sum(2 ** i for i in range(LAYERS)) * STACKS
        self.causal = CausalConv1d(CLASSES, RES, kernel_size=2)
        self.res_stack = nn.ModuleList([ResidualBlock(2 ** i) for _ in range(STACKS) for i in range(LAYERS)])
        self.densnet = nn.Sequential(nn.ReLU(), nn.Conv1d(SKIP, SKIP, 1), nn.ReLU(), nn.Conv1d(SKIP, CLASSES, 1))

    def forward(self, x):
        output = x.transpose(1, 2)
        output_size = output.size(2) - self.receptive_fields
        output = self.causal(output)
        skips = []
        for block in self.res_stack:
            output, skip = block(output, output_size)
            skips.append(skip)
        return self.densnet(torch.sum(torch.stack(skips), dim=0)).transpose(1, 2).contiguous()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = WaveNet()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.t = np.arange(SAMPLES, dtype=np.float32) / SAMPLES

    def step(self) -> float:
        freq = self.r.uniform(4, 40, (BATCH, 1)).astype(np.float32)
        noise = 0.05 * self.r.standard_normal((BATCH, SAMPLES)).astype(np.float32)
        quantized = mu_law_encode(torch.from_numpy(0.8 * np.sin(2 * np.pi * freq * self.t) + noise))
        logits = self.forward(F.one_hot(quantized, CLASSES).float())
        target = quantized[:, self.model.receptive_fields:]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, CLASSES), target[:, 1:].reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(self.model.parameters(), 0.5)
        self.optimizer.step()
        return loss.item()
