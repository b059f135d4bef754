"""DDSP (acids-ircam/ddsp_pytorch) at small width: a harmonic-plus-noise synthesizer
trained through a multi-scale spectral loss.

The decoder: LayerNorm MLPs on pitch and loudness, a GRU, an MLP, projections to 32
harmonic amplitudes and 33 noise bands (exp-sigmoid scaling). The synthesizer: harmonics
above Nyquist masked, amplitudes upsampled by interpolate, phase by cumsum of the
instantaneous frequency, sum of sin(k * phase) times amplitudes; filtered noise by irfft of
the bands into a Hann-windowed impulse response (roll, pad) and FFT convolution; a learned
reverb tail by FFT convolution. Loss: ``torch.stft(return_complex=True).abs()`` at four FFT
sizes (2048 down to 256, 75% overlap), L1 of magnitudes and of log magnitudes (clamp_min).
Batch 4 of 64 frames of 64 samples at 16 kHz, Adam. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.fft as fft
import torch.nn as nn

from .common import load_params, rng

NAME = "ddsp"
SR, BLOCK, FRAMES, BATCH, HIDDEN, HARMONICS, BANDS = 16000, 64, 64, 4, 64, 32, 33
SCALES, OVERLAP = (2048, 1024, 512, 256), 0.75


def scale_function(x):
    return 2 * torch.sigmoid(x) ** math.log(10) + 1e-7


def upsample(signal, factor):
    return nn.functional.interpolate(signal.permute(0, 2, 1), size=signal.shape[1] * factor).permute(0, 2, 1)


def fft_convolve(signal, kernel):
    signal = nn.functional.pad(signal, (0, signal.shape[-1]))
    kernel = nn.functional.pad(kernel, (kernel.shape[-1], 0))
    output = fft.irfft(fft.rfft(signal) * fft.rfft(kernel))
    return output[..., output.shape[-1] // 2:]


def amp_to_impulse_response(amp, target_size):
    amp = fft.irfft(torch.view_as_complex(torch.stack([amp, torch.zeros_like(amp)], -1)))
    filter_size = amp.shape[-1]
    amp = torch.roll(amp, filter_size // 2, -1) * torch.hann_window(filter_size, dtype=amp.dtype)
    amp = nn.functional.pad(amp, (0, int(target_size) - int(filter_size)))
    return torch.roll(amp, -filter_size // 2, -1)


def mlp(n_in, hidden, layers=3):
    mods, d = [], n_in
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.LayerNorm(hidden), nn.LeakyReLU()]
        d = hidden
    return nn.Sequential(*mods)


class DDSP(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_mlps = nn.ModuleList([mlp(1, HIDDEN), mlp(1, HIDDEN)])
        self.gru = nn.GRU(2 * HIDDEN, HIDDEN, batch_first=True)
        self.out_mlp = mlp(HIDDEN + 2, HIDDEN)
        self.proj_matrices = nn.ModuleList([nn.Linear(HIDDEN, HARMONICS + 1), nn.Linear(HIDDEN, BANDS)])
        self.reverb_noise = nn.Parameter(torch.zeros(SR // 8))
        self.reverb_decay = nn.Parameter(torch.tensor([5.0]))
        self.register_buffer("t", torch.arange(SR // 8) / SR)

    def forward(self, pitch, loudness, noise):
        hidden = torch.cat([self.in_mlps[0](pitch), self.in_mlps[1](loudness)], -1)
        hidden = self.out_mlp(torch.cat([self.gru(hidden)[0], pitch, loudness], -1))
        param = scale_function(self.proj_matrices[0](hidden))
        total_amp, amplitudes = param[..., :1], param[..., 1:]
        amplitudes = amplitudes * ((pitch * torch.arange(1, HARMONICS + 1).to(pitch) < SR / 2).float() + 1e-4)
        amplitudes = amplitudes / amplitudes.sum(-1, keepdim=True) * total_amp
        amplitudes, pitch = upsample(amplitudes, BLOCK), upsample(pitch, BLOCK)
        omega = torch.cumsum(2 * math.pi * pitch / SR, 1)
        harmonic = (torch.sin(omega * torch.arange(1, HARMONICS + 1).to(omega)) * amplitudes).sum(-1)
        impulse = amp_to_impulse_response(scale_function(self.proj_matrices[1](hidden) - 5), BLOCK)
        noise = fft_convolve(noise, impulse).reshape(noise.shape[0], -1)
        signal = harmonic + noise
        ir = self.reverb_noise * torch.exp(-nn.functional.softplus(-self.reverb_decay) * self.t * 500)
        ir = torch.cat([torch.ones(1), ir[1:]])
        return fft_convolve(signal, nn.functional.pad(ir, (0, signal.shape[-1] - ir.shape[-1])))


def multiscale_fft(signal):
    return [torch.stft(signal, s, int(s * (1 - OVERLAP)), s, torch.hann_window(s), True, normalized=True,
                       return_complex=True).abs() for s in SCALES]


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = DDSP()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)

    def step(self) -> float:
        f0 = self.r.uniform(80, 400, (BATCH, 1)) * (1 + 0.05 * np.sin(np.linspace(0, 3, FRAMES)))
        phase = 2 * np.pi * np.cumsum(np.repeat(f0, BLOCK, 1), 1) / SR
        s = 0.3 * sum(np.sin(k * phase) / k for k in range(1, 8)) + 0.01 * self.r.standard_normal(phase.shape)
        loud = np.log(np.abs(s).reshape(BATCH, FRAMES, BLOCK).mean(-1) + 1e-3)
        f = lambda a: torch.from_numpy(a.astype(np.float32))
        y = self.forward(f(f0).unsqueeze(-1), f((loud - loud.mean()) / loud.std()).unsqueeze(-1),
                         f(self.r.uniform(-1, 1, (BATCH, FRAMES, BLOCK))))
        loss = 0
        for s_x, s_y in zip(multiscale_fft(f(s)), multiscale_fft(y)):
            loss = loss + (s_x - s_y).abs().mean() + (s_x.clamp_min(1e-7).log() - s_y.clamp_min(1e-7).log()).abs().mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
