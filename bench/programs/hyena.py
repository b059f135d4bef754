"""A Hyena language model training step (safari's HyenaOperator, order 2, at small size).

Long convolutions whose filters are implicit (an MLP with sine activations over
complex-exponential positional features, times an exponentially decaying window per
channel), applied by ``torch.fft.rfft``/``irfft`` at n = 2L plus a bias term; a short
depthwise causal Conv1d on the projected inputs, elementwise gating, pre-norm blocks with
a GELU MLP, tied embeddings. 2 layers of width 64, batch 8 of 128 tokens, cross-entropy,
AdamW, clip_grad_norm_. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "hyena"
BATCH, SEQ, VOCAB, DIM = 8, 128, 64, 64


def fftconv(u, k, D):
    seqlen = u.shape[-1]
    fft_size = 2 * seqlen
    k_f = torch.fft.rfft(k, n=fft_size) / fft_size
    u_f = torch.fft.rfft(u.to(dtype=k.dtype), n=fft_size)
    y = torch.fft.irfft(u_f * k_f, n=fft_size, norm="forward")[..., :seqlen]
    out = y + u * D.unsqueeze(-1)
    return out.to(dtype=u.dtype)


class Sin(nn.Module):
    def __init__(self, dim, w=10):
        super().__init__()
        self.freq = nn.Parameter(w * torch.ones(1, dim))

    def forward(self, x):
        return torch.sin(self.freq * x)


class PositionalEmbedding(nn.Module):
    def __init__(self, emb_dim, seq_len):
        super().__init__()
        self.seq_len = seq_len
        t = torch.linspace(0, 1, self.seq_len)[None, :, None]
        bands = (emb_dim - 1) // 2
        t_rescaled = torch.linspace(0, seq_len - 1, seq_len)[None, :, None]
        w = 2 * math.pi * t_rescaled / seq_len
        f = torch.linspace(1e-4, bands - 1, bands)[None, None]
        z = torch.exp(-1j * f * w)
        z = torch.cat([t, z.real, z.imag], dim=-1)
        self.register_buffer("z", z)
        self.register_buffer("t", t)

    def forward(self, L):
        return self.z[:, :L], self.t[:, :L]


class ExponentialModulation(nn.Module):
    def __init__(self, d_model, fast_decay_pct=0.3, slow_decay_pct=1.5, target=1e-2, shift=0.0):
        super().__init__()
        self.shift = shift
        max_decay = math.log(target) / fast_decay_pct
        min_decay = math.log(target) / slow_decay_pct
        deltas = torch.linspace(min_decay, max_decay, d_model)[None, None]
        self.register_buffer("deltas", deltas)

    def forward(self, t, x):
        decay = torch.exp(-t * self.deltas.abs())
        return x * (decay + self.shift)


class HyenaFilter(nn.Module):
    def __init__(self, d_model, emb_dim=5, order=16, seq_len=64, w=1):
        super().__init__()
        self.d_model = d_model
        self.bias = nn.Parameter(torch.randn(d_model))
        self.pos_emb = PositionalEmbedding(emb_dim, seq_len)
        act = Sin(dim=order, w=w)
        self.implicit_filter = nn.Sequential(nn.Linear(emb_dim, order), act, nn.Linear(order, order), act,
                                             nn.Linear(order, d_model, bias=False))
        self.modulation = ExponentialModulation(d_model)

    def filter(self, L):
        z, t = self.pos_emb(L)
        h = self.implicit_filter(z)
        return self.modulation(t, h)

    def forward(self, x, L, k=None, bias=None):
        if k is None:
            k = self.filter(L)
        k = k[0] if type(k) is tuple else k
        return fftconv(x, k, bias)


class HyenaOperator(nn.Module):
    def __init__(self, d_model, l_max, order=2, filter_order=16):
        super().__init__()
        self.d_model, self.l_max, self.order = d_model, l_max, order
        inner_width = d_model * (order + 1)
        self.in_proj = nn.Linear(d_model, inner_width)
        self.out_proj = nn.Linear(d_model, d_model)
        self.short_filter = nn.Conv1d(inner_width, inner_width, 3, padding=2, groups=inner_width)
        self.filter_fn = HyenaFilter(d_model * (order - 1), order=filter_order, seq_len=l_max)

    def forward(self, u):
        l = u.size(-2)
        l_filter = min(l, self.l_max)
        u = self.in_proj(u).transpose(1, 2)
        uc = self.short_filter(u)[..., :l_filter]
        *x, v = uc.split(self.d_model, dim=1)
        k = self.filter_fn.filter(l_filter)[0]
        k = k.transpose(0, 1).reshape(self.order - 1, self.d_model, l_filter)
        bias = self.filter_fn.bias.reshape(self.order - 1, self.d_model)
        for o, x_i in enumerate(reversed(x[1:])):
            v = v * x_i
            v = self.filter_fn(v, l_filter, k=k[o], bias=bias[o])
        y = (v * x[0]).transpose(1, 2)
        return self.out_proj(y)


class Block(nn.Module):
    def __init__(self, d, l_max):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mixer = HyenaOperator(d, l_max)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class HyenaLM(nn.Module):
    def __init__(self, vocab, d=DIM, n_layer=2, l_max=SEQ):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, l_max) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = HyenaLM(VOCAB)
        load_params(NAME, self.model)
        with torch.no_grad():
            self.model.wte.weight.mul_(0.05)   # (tied to the output layer: small logits)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        text = (np.arange(20000) * 7 % 61 + r.integers(0, 3, 20000)) % VOCAB
        self.batches = [torch.from_numpy(np.stack([text[s:s + SEQ + 1] for s in r.integers(0, 20000 - SEQ - 1, BATCH)]))
                        for _ in range(4)]
        self.i = 0

    def step(self) -> float:
        seq = self.batches[self.i % len(self.batches)]
        self.i += 1
        logits = self.forward(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        self.optimizer.step()
        return loss.item()
