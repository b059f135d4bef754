"""A Whisper-style speech recognizer trained teacher-forced, as openai-whisper's model.py
writes the model.

One step is a batch of 8 one-second clips at 8 kHz (a tone per spoken digit) and their
transcripts of up to 12 tokens. The features, outside the model as whisper's data
pipeline computes them: ``torch.stft`` (n_fft 200, hop 80, a Hann window), the last frame
dropped, a 40-band mel filterbank by matmul, log10 clamped to 8 below the maximum. The
model: two Conv1d + GELU (the second at stride 2) and sinusoidal positions, 2 encoder
blocks and 2 decoder blocks of width 64, 4 heads (q and k each scaled by d ** -0.25, a
float softmax, a -inf triu mask, cross-attention), logits against the tied token
embedding; cross-entropy with ignore_index padding, AdamW. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "whisper"
SR, N_FFT, HOP, N_MELS, WIDTH, HEADS, LAYERS, BATCH = 8000, 200, 80, 40, 64, 4, 2, 8
SOT, EOT, VOCAB, TEXT = 10, 11, 12, 14


def mel_filters():
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    pts = 700.0 * (10 ** (np.linspace(0, hz_to_mel(SR / 2), N_MELS + 2) / 2595.0) - 1.0)
    freqs = np.linspace(0, SR / 2, N_FFT // 2 + 1)
    lower = (freqs[None] - pts[:-2, None]) / (pts[1:-1, None] - pts[:-2, None])
    upper = (pts[2:, None] - freqs[None]) / (pts[2:, None] - pts[1:-1, None])
    return np.maximum(0, np.minimum(lower, upper)).astype(np.float32)


def log_mel_spectrogram(audio, filters):
    stft = torch.stft(audio, N_FFT, HOP, window=torch.hann_window(N_FFT), return_complex=True)
    mel_spec = filters @ stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


class MultiHeadAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(WIDTH, WIDTH)
        self.key = nn.Linear(WIDTH, WIDTH, bias=False)
        self.value = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x, xa=None, mask=None):
        q = self.query(x)
        k = self.key(x if xa is None else xa)
        v = self.value(x if xa is None else xa)
        n_ctx = q.shape[1]
        scale = (WIDTH // HEADS) ** -0.25
        q = q.view(*q.shape[:2], HEADS, -1).permute(0, 2, 1, 3) * scale
        k = k.view(*k.shape[:2], HEADS, -1).permute(0, 2, 3, 1) * scale
        v = v.view(*v.shape[:2], HEADS, -1).permute(0, 2, 1, 3)
        qk = q @ k
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        w = F.softmax(qk.float(), dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, cross_attention=False):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(), nn.LayerNorm(WIDTH)
        self.cross_attn = MultiHeadAttention() if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(WIDTH) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
        self.mlp_ln = nn.LayerNorm(WIDTH)

    def forward(self, x, xa=None, mask=None):
        x = x + self.attn(self.attn_ln(x), mask=mask)
        if self.cross_attn:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa)
        return x + self.mlp(self.mlp_ln(x))


class Whisper(nn.Module):
    def __init__(self, n_audio_ctx=50):
        super().__init__()
        self.conv1 = nn.Conv1d(N_MELS, WIDTH, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(WIDTH, WIDTH, kernel_size=3, stride=2, padding=1)
        inv = torch.exp(-math.log(10000) / (WIDTH // 2 - 1) * torch.arange(WIDTH // 2))
        t = torch.arange(n_audio_ctx)[:, None] * inv[None, :]
        self.register_buffer("audio_positions", torch.cat([torch.sin(t), torch.cos(t)], dim=1))
        self.encoder = nn.ModuleList([ResidualAttentionBlock() for _ in range(LAYERS)])
        self.ln_post = nn.LayerNorm(WIDTH)
        self.token_embedding = nn.Embedding(VOCAB, WIDTH)
        self.text_positions = nn.Parameter(torch.zeros(TEXT, WIDTH))
        self.decoder = nn.ModuleList([ResidualAttentionBlock(cross_attention=True) for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(WIDTH)
        self.register_buffer("mask", torch.empty(TEXT, TEXT).fill_(-np.inf).triu_(1), persistent=False)

    def forward(self, mel, tokens):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        x = x + self.audio_positions[: x.shape[1]]
        for block in self.encoder:
            x = block(x)
        xa = self.ln_post(x)
        x = self.token_embedding(tokens) + self.text_positions[: tokens.shape[-1]]
        for block in self.decoder:
            x = block(x, xa, mask=self.mask)
        return (self.ln(x) @ torch.transpose(self.token_embedding.weight, 0, 1)).float()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = Whisper()
        load_params(NAME, self.model)
        self.fwd = compile(self.model)
        self.filters = torch.from_numpy(mel_filters())
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def batch(self):
        n_digits = 12
        lens = self.r.integers(4, n_digits + 1, BATCH)
        digits = self.r.integers(0, 10, (BATCH, n_digits))
        t = np.arange(SR // n_digits) / SR
        audio = 0.01 * self.r.standard_normal((BATCH, SR))
        tokens = np.full((BATCH, TEXT), -100)
        tokens[:, 0] = SOT
        for i in range(BATCH):
            for j in range(lens[i]):
                audio[i, j * len(t):(j + 1) * len(t)] += np.sin(2 * np.pi * (300 + 250 * digits[i, j]) * t)
            tokens[i, 1:lens[i] + 1] = digits[i, :lens[i]]
            tokens[i, lens[i] + 1] = EOT
        return torch.from_numpy(audio.astype(np.float32)), torch.from_numpy(tokens)

    def step(self) -> float:
        audio, tokens = self.batch()
        mel = log_mel_spectrogram(audio, self.filters)
        logits = self.fwd(mel, tokens[:, :-1].clamp(min=0))
        loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], ignore_index=-100)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
