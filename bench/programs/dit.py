"""A DiT training step (facebookresearch/DiT's models.py and train.py, at small size).

Patch embedding by a strided conv, sinusoidal timestep and class-label embeddings (labels
dropped to the null class 10% of the time, the mask drawn with numpy), four adaLN-Zero
blocks (LayerNorm without affine, modulated by the conditioning; nn.MultiheadAttention;
tanh GELU MLP), the final modulated layer and the einsum unpatchify; the epsilon-prediction
MSE at random timesteps of a linear schedule, AdamW. 32x32x4 latents, patch 2 (256
tokens), width 96, 4 heads, batch 16. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "dit"
BATCH, SIZE, PATCH, CH, HIDDEN, DEPTH, HEADS, CLASSES, T = 16, 32, 2, 4, 96, 4, 4, 10, 1000


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq=256):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(nn.Linear(freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.freq))


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * hidden, hidden))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        h = modulate(self.norm1(x), shift_msa, scale_msa)
        x = x + gate_msa.unsqueeze(1) * self.attn(h, h, h, need_weights=False)[0]
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


class DiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.x_embedder = nn.Conv2d(CH, HIDDEN, PATCH, stride=PATCH)
        self.t_embedder = TimestepEmbedder(HIDDEN)
        self.y_embedder = nn.Embedding(CLASSES + 1, HIDDEN)   # the last row: the null class
        self.pos_embed = nn.Parameter(torch.zeros(1, (SIZE // PATCH) ** 2, HIDDEN), requires_grad=False)
        self.blocks = nn.ModuleList([DiTBlock(HIDDEN, HEADS) for _ in range(DEPTH)])
        self.norm_final = nn.LayerNorm(HIDDEN, elementwise_affine=False, eps=1e-6)
        self.final_adaLN = nn.Sequential(nn.SiLU(), nn.Linear(HIDDEN, 2 * HIDDEN))
        self.final_linear = nn.Linear(HIDDEN, PATCH * PATCH * CH)

    def unpatchify(self, x):
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(shape=(x.shape[0], h, w, PATCH, PATCH, CH))
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(shape=(x.shape[0], CH, h * PATCH, h * PATCH))

    def forward(self, x, t, y):
        x = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y)
        for block in self.blocks:
            x = block(x, c)
        shift, scale = self.final_adaLN(c).chunk(2, dim=1)
        return self.unpatchify(self.final_linear(modulate(self.norm_final(x), shift, scale)))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = DiT()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0)
        self.alphas_cumprod = torch.cumprod(1.0 - torch.linspace(1e-4, 0.02, T, dtype=torch.float64), 0).float()
        self.batches = []
        for _ in range(4):
            y = r.integers(0, CLASSES, BATCH)
            y = np.where(r.random(BATCH) < 0.1, CLASSES, y)   # classifier-free guidance's label drop
            self.batches.append(tuple(torch.from_numpy(a) for a in (
                r.standard_normal((BATCH, CH, SIZE, SIZE), dtype=np.float32), r.integers(0, T, BATCH), y,
                r.standard_normal((BATCH, CH, SIZE, SIZE), dtype=np.float32))))
        self.i = 0

    def step(self) -> float:
        x0, t, y, noise = self.batches[self.i % len(self.batches)]
        self.i += 1
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        loss = F.mse_loss(self.forward(xt, t, y), noise)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
