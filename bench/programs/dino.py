"""DINO self-distillation steps, as facebookresearch/dino's main_dino.py writes them.

A ViT (width 96, 4 blocks, 4 heads, patch 4) student and an EMA teacher, each wrapped in a
MultiCropWrapper that groups the crops by resolution (``torch.cumsum(torch.unique_consecutive(
..., return_counts=True)[1], 0)``) and runs each group through the backbone; two 32x32 global
crops and four 16x16 local ones (positional embeddings interpolated bicubically) of a batch
of 16; a 3-layer DINOHead to 256 prototypes with a weight-normed last layer; the loss's
center a buffer updated by an EMA; AdamW with the learning rate and weight decay set per
param group each step; the teacher updated by ``param_k.data.mul_(m).add_((1 - m) *
param_q.detach().data)``. Compiled: student and teacher (each one capture: the crop groups
are read from sizes).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "dino"
BATCH, DIM, DEPTH, HEADS, OUT = 16, 96, 4, 4, 256


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * (C // self.num_heads) ** -0.5).softmax(dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=32, patch_size=4):
        super().__init__()
        self.patch_size = patch_size
        self.patch_embed = nn.Conv2d(3, DIM, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 1, DIM))
        self.blocks = nn.ModuleList([Block(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM, eps=1e-6)

    def interpolate_pos_encoding(self, x, w, h):
        npatch, N = x.shape[1] - 1, self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        w0, h0 = w // self.patch_size + 0.1, h // self.patch_size + 0.1
        patch_pos_embed = F.interpolate(
            self.pos_embed[:, 1:].reshape(1, int(math.sqrt(N)), int(math.sqrt(N)), DIM).permute(0, 3, 1, 2),
            scale_factor=(w0 / math.sqrt(N), h0 / math.sqrt(N)), mode='bicubic')
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, DIM)
        return torch.cat((self.pos_embed[:, 0].unsqueeze(0), patch_pos_embed), dim=1)

    def forward(self, x):
        B, nc, w, h = x.shape
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1)
        x = x + self.interpolate_pos_encoding(x, w, h)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)[:, 0]


class DINOHead(nn.Module):
    def __init__(self, hidden_dim=256, bottleneck_dim=64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(DIM, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, hidden_dim), nn.GELU(),
                                 nn.Linear(hidden_dim, bottleneck_dim))
        self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, OUT, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        self.last_layer.weight_g.requires_grad = False

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class MultiCropWrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone, self.head = VisionTransformer(), DINOHead()

    def forward(self, x):
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0)
        start_idx, output = 0, torch.empty(0)
        for end_idx in idx_crops:
            output = torch.cat((output, self.backbone(torch.cat(x[start_idx: end_idx]))))
            start_idx = end_idx
        return self.head(output)


def cosine(base, final, n):
    return final + 0.5 * (base - final) * (1 + np.cos(np.pi * np.arange(n) / n))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [[torch.from_numpy(r.random((BATCH, 3, s, s)).astype(np.float32))
                         for s in (32, 32, 16, 16, 16, 16)] for _ in range(4)]
        self.student, self.teacher = MultiCropWrapper(), MultiCropWrapper()
        load_params(NAME, self.student)
        self.student.head.last_layer.weight_g.data.fill_(1)
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad = False
        self.s, self.t = compile(self.student), compile(self.teacher)
        self.center = torch.zeros(1, OUT)
        params = [p for p in self.student.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW([{'params': [p for p in params if p.ndim > 1]},
                                            {'params': [p for p in params if p.ndim <= 1], 'weight_decay': 0.}])
        self.lr, self.wd, self.mom = cosine(5e-4, 1e-6, 1000), cosine(0.04, 0.4, 1000), cosine(0.996, 1, 1000)
        self.i = 0

    def step(self) -> float:
        it, views = self.i % 1000, self.batches[self.i % len(self.batches)]
        self.i += 1
        for i, g in enumerate(self.optimizer.param_groups):
            g["lr"] = self.lr[it]
            if i == 0:
                g["weight_decay"] = self.wd[it]
        teacher_output = self.t(views[:2])
        student_out = (self.s(views) / 0.1).chunk(len(views))
        teacher_out = F.softmax((teacher_output - self.center) / 0.04, dim=-1).detach().chunk(2)
        total, n = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v != iq:
                    total += torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1).mean()
                    n += 1
        loss = total / n
        with torch.no_grad():
            self.center = self.center * 0.9 + teacher_output.mean(0, keepdim=True) * 0.1
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            m = self.mom[it]
            for param_q, param_k in zip(self.student.parameters(), self.teacher.parameters()):
                param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
        return loss.item()
