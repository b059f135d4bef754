"""A Vision Transformer on 32x32 images, as the timm-style CIFAR-10 tutorials write it
with PyTorch's own encoder layers.

A ``Conv2d`` patch embedding (patch 4: 64 patches), a class token and learned position
embeddings, ``nn.TransformerEncoder`` of 4 pre-norm ``nn.TransformerEncoderLayer``s
(width 128, 4 heads, GELU feed-forward 512, ``batch_first``), a LayerNorm and a linear
head on the class token; ``CrossEntropyLoss(label_smoothing=0.1)``, AdamW, a warm-up
then cosine ``LambdaLR``. Batch 32. Compiled: the model.
"""
import math

import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "vit"
IMG, PATCH, DIM, DEPTH, HEADS, CLASSES, BATCH = 32, 4, 128, 4, 4, 10, 32


class PatchEmbed(nn.Module):
    def __init__(self, img_size=IMG, patch_size=PATCH, in_chans=3, embed_dim=DIM):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)   # (B, N, D)


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = PatchEmbed()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 1, DIM))
        layer = nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=4 * DIM, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        x = self.patch_embed(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        x = self.encoder(x)
        return self.head(self.norm(x)[:, 0])


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.standard_normal((BATCH, 3, IMG, IMG), dtype="float32")),
                         torch.from_numpy(r.integers(0, CLASSES, BATCH)))
                        for _ in range(4)]
        self.model = ViT()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.05)
        warmup, total = 5, 100
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda e: (e + 1) / warmup if e < warmup
            else 0.5 * (1 + math.cos(math.pi * (e - warmup) / total)))
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        images, labels = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        outputs = self.forward(images)
        loss = self.criterion(outputs, labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()
