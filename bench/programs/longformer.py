"""A Longformer document classifier with its sliding-window attention as re-implementations
write it.

One step is a batch of 8 documents of 256 tokens (their lengths varying, padded) with the
first 8 tokens global (a question). Attention: keys and values padded by the window (16
each side) and cut into bands by ``unfold``, scores by einsum, a banded mask from arange
offsets, padding and global positions, global keys scored against every query and
concatenated before the softmax, global queries with their own projections attending the
whole sequence, written back by ``torch.where``. 2 post-norm layers of width 64, 4 heads;
a tanh head on the first token, cross-entropy, AdamW. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "longformer"
VOCAB, WIDTH, HEADS, LAYERS, WINDOW, BATCH, SEQ, GLOBAL, CLASSES = 1000, 64, 4, 2, 16, 8, 256, 8, 4


class LongformerSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.query_global, self.key_global, self.value_global = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.out = nn.Linear(WIDTH, WIDTH)

    def heads(self, x):
        return x.view(x.shape[0], x.shape[1], HEADS, -1).transpose(1, 2)

    def forward(self, x, attention_mask, is_global):
        B, T, D = x.shape
        w, dh = WINDOW, D // HEADS
        neg = torch.finfo(x.dtype).min
        q = self.heads(self.query(x)) / math.sqrt(dh)
        k, v = self.heads(self.key(x)), self.heads(self.value(x))
        k_band = F.pad(k, (0, 0, w, w)).unfold(2, 2 * w + 1, 1)
        v_band = F.pad(v, (0, 0, w, w)).unfold(2, 2 * w + 1, 1)
        band = torch.einsum("bhtd,bhtdw->bhtw", q, k_band)
        pos = torch.arange(T)[:, None] + torch.arange(-w, w + 1)
        in_range = (pos >= 0) & (pos < T)
        key_ok = F.pad(attention_mask, (w, w)).unfold(1, 2 * w + 1, 1).bool()
        key_global = F.pad(is_global, (w, w)).unfold(1, 2 * w + 1, 1)
        band = band.masked_fill(~(in_range & key_ok & ~key_global)[:, None], neg)
        glob = (q @ k.transpose(-1, -2)).masked_fill(~(is_global & attention_mask.bool())[:, None, None, :], neg)
        probs = torch.cat([glob, band], dim=-1).softmax(dim=-1)
        out = probs[..., :T] @ v + torch.einsum("bhtw,bhtdw->bhtd", probs[..., T:], v_band)
        qg = self.heads(self.query_global(x)) / math.sqrt(dh)
        kg, vg = self.heads(self.key_global(x)), self.heads(self.value_global(x))
        sg = (qg @ kg.transpose(-1, -2)).masked_fill(attention_mask[:, None, None, :] == 0, neg)
        out = torch.where(is_global[:, None, :, None], sg.softmax(-1) @ vg, out)
        return self.out(out.transpose(1, 2).reshape(B, T, D))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = LongformerSelfAttention()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.ff = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, attention_mask, is_global):
        x = self.ln1(x + self.attn(x, attention_mask, is_global))
        return self.ln2(x + self.ff(x))


class Longformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.cls = nn.Linear(WIDTH, CLASSES)

    def forward(self, input_ids, attention_mask, global_attention_mask):
        is_global = global_attention_mask > 0
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        for layer in self.layers:
            x = layer(x, attention_mask, is_global)
        return self.cls(torch.tanh(x[:, 0]))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = Longformer()
        load_params(NAME, self.model)
        self.fwd = compile(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def step(self) -> float:
        ids = self.r.integers(2, VOCAB, (BATCH, SEQ))
        lens = self.r.integers(SEQ // 2, SEQ + 1, BATCH)
        mask = (np.arange(SEQ)[None] < lens[:, None]).astype(np.int64)
        glob = np.zeros_like(ids)
        glob[:, :GLOBAL] = 1
        y = ids[:, 1:GLOBAL].sum(1) % CLASSES
        logits = self.fwd(torch.from_numpy(ids * mask), torch.from_numpy(mask), torch.from_numpy(glob))
        loss = F.cross_entropy(logits, torch.from_numpy(y))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
