"""Slot Attention (Locatello et al.) object discovery, as its PyTorch ports write it.

Batch 8 images of 32x32; a 4-layer 5x5 CNN encoder with a soft position embedding, 5
slots of width 32 around learned mu/log-sigma (the noise from numpy), 3 iterations of
attention normalized over the slots then the inputs, a GRUCell update on the flattened
slots and a residual MLP; a spatial broadcast decoder of ConvTranspose2d from 8x8, the
slots' reconstructions composited by a softmax over their alpha masks (``split``); MSE,
Adam, ``clip_grad_norm_``. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "slotattn"
BATCH, RES, SLOTS, DIM = 8, 32, 5, 32


def build_grid(res):
    grid = np.stack(np.meshgrid(np.linspace(0., 1., res), np.linspace(0., 1., res), indexing="ij"), -1)
    grid = grid.reshape(1, res, res, 2).astype(np.float32)
    return torch.from_numpy(np.concatenate([grid, 1.0 - grid], axis=-1))


class SoftPositionEmbed(nn.Module):
    def __init__(self, hidden, res):
        super().__init__()
        self.embedding = nn.Linear(4, hidden)
        self.register_buffer("grid", build_grid(res))

    def forward(self, x):
        return x + self.embedding(self.grid)


class SlotAttention(nn.Module):
    def __init__(self, num_slots, dim, iters=3, eps=1e-8, hidden_dim=128):
        super().__init__()
        self.num_slots, self.iters, self.eps, self.scale = num_slots, iters, eps, dim ** -0.5
        self.slots_mu = nn.Parameter(torch.randn(1, 1, dim))
        self.slots_logsigma = nn.Parameter(torch.zeros(1, 1, dim))
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.gru = nn.GRUCell(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden_dim), nn.ReLU(inplace=True), nn.Linear(hidden_dim, dim))
        self.norm_input, self.norm_slots, self.norm_pre_ff = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, inputs, noise):
        b, n, d = inputs.shape
        slots = self.slots_mu.expand(b, self.num_slots, -1) + self.slots_logsigma.exp().expand(b, self.num_slots, -1) * noise
        inputs = self.norm_input(inputs)
        k, v = self.to_k(inputs), self.to_v(inputs)
        for _ in range(self.iters):
            slots_prev = slots
            q = self.to_q(self.norm_slots(slots))
            attn = torch.einsum('bid,bjd->bij', q, k).mul(self.scale).softmax(dim=1) + self.eps
            attn = attn / attn.sum(dim=-1, keepdim=True)
            updates = torch.einsum('bjd,bij->bid', v, attn)
            slots = self.gru(updates.reshape(-1, d), slots_prev.reshape(-1, d)).reshape(b, -1, d)
            slots = slots + self.mlp(self.norm_pre_ff(slots))
        return slots


class SlotAttentionAutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(*[m for i in range(4) for m in (nn.Conv2d(3 if i == 0 else DIM, DIM, 5, padding=2),
                                                                  nn.ReLU())])
        self.enc_pos = SoftPositionEmbed(DIM, RES)
        self.mlp = nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, DIM), nn.ReLU(), nn.Linear(DIM, DIM))
        self.slot_attention = SlotAttention(SLOTS, DIM)
        self.dec_pos = SoftPositionEmbed(DIM, RES // 4)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(DIM, DIM, 5, stride=2, padding=2, output_padding=1), nn.ReLU(),
            nn.ConvTranspose2d(DIM, DIM, 5, stride=2, padding=2, output_padding=1), nn.ReLU(),
            nn.ConvTranspose2d(DIM, 4, 3, stride=1, padding=1))

    def forward(self, image, noise):
        x = self.enc_pos(self.enc(image).permute(0, 2, 3, 1))
        slots = self.slot_attention(self.mlp(torch.flatten(x, 1, 2)), noise)
        x = slots.reshape(-1, 1, 1, DIM).repeat(1, RES // 4, RES // 4, 1)
        x = self.dec(self.dec_pos(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        recons, masks = x.reshape(image.shape[0], SLOTS, RES, RES, 4).split([3, 1], dim=-1)
        masks = masks.softmax(dim=1)
        return torch.sum(recons * masks, dim=1).permute(0, 3, 1, 2)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = SlotAttentionAutoEncoder()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=4e-4)
        self.forward = compile(self.model)

    def step(self) -> float:
        img = np.full((BATCH, 3, RES, RES), -0.8, np.float32)
        yy, xx = np.mgrid[:RES, :RES]
        for b in range(BATCH):
            for cy, cx, r in self.r.uniform([4, 4, 2], [RES - 4, RES - 4, 6], (3, 3)):
                img[b][:, (yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = self.r.uniform(-0.5, 1.0, (3, 1))
        image = torch.from_numpy(img)
        noise = torch.from_numpy(self.r.standard_normal((BATCH, SLOTS, DIM)).astype(np.float32))
        loss = F.mse_loss(self.forward(image, noise), image)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()
