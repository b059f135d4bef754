"""Informer forecasting (the paper repository's layers): ProbSparse attention and distilling.

A batch of 32 windows of a 7-channel series: 96 steps in, a decoder fed 48 known steps and
24 zero placeholders. ProbSparse self-attention (width 64, 4 heads, factor 5) samples
c*ln(L) keys per query (the indices drawn by numpy each step, torch.randint's role),
measures each query's sparsity M = max - mean of its sampled scores, keeps the top c*ln(L)
queries by ``topk``, gathers them by advanced indexing and scatters their attention back
into a mean (encoder) or ``cumsum`` (masked decoder, ProbMask) context. Two encoder layers
with a distilling Conv1d (circular) + BatchNorm1d + ELU + MaxPool1d between them, one
decoder layer with full cross-attention, MSE, Adam. Compiled: the model.
"""
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "informer"
BATCH, SEQ, LABEL, PRED, CH, D, HEADS, FACTOR = 32, 96, 48, 24, 7, 64, 4, 5


class ProbAttention(nn.Module):
    def __init__(self, mask_flag):
        super().__init__()
        self.mask_flag = mask_flag

    def forward(self, queries, keys, values, index_sample):
        B, L_Q, H, E = queries.shape
        L_K = keys.shape[1]
        q, k, v = queries.transpose(2, 1), keys.transpose(2, 1), values.transpose(2, 1)
        U_part = min(FACTOR * int(np.ceil(np.log(L_K))), L_K)
        u = min(FACTOR * int(np.ceil(np.log(L_Q))), L_Q)
        index_sample = index_sample[:L_Q, :U_part] % L_K
        K_sample = k.unsqueeze(-3).expand(B, H, L_Q, L_K, E)[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(u, sorted=False)[1]
        b_idx, h_idx = torch.arange(B)[:, None, None], torch.arange(H)[None, :, None]
        scores = torch.matmul(q[b_idx, h_idx, M_top, :], k.transpose(-2, -1)) / sqrt(E)
        if self.mask_flag:
            context = v.cumsum(dim=-2)
            mask = torch.ones(L_Q, L_K, dtype=torch.bool).triu(1)[None, None].expand(B, H, L_Q, L_K)
            scores = scores.masked_fill(mask[b_idx, h_idx, M_top, :], -np.inf)
        else:
            context = v.mean(dim=-2).unsqueeze(-2).expand(B, H, L_Q, E).clone()
        context[b_idx, h_idx, M_top, :] = torch.matmul(torch.softmax(scores, dim=-1), v)
        return context.transpose(2, 1).contiguous()


class FullAttention(nn.Module):
    def forward(self, queries, keys, values, index_sample):
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        A = torch.softmax(scores / sqrt(queries.shape[-1]), dim=-1)
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, mix=False):
        super().__init__()
        self.inner_attention = attention
        self.query_projection, self.key_projection = nn.Linear(D, D), nn.Linear(D, D)
        self.value_projection, self.out_projection = nn.Linear(D, D), nn.Linear(D, D)
        self.mix = mix

    def forward(self, queries, keys, values, index_sample):
        B, L, _ = queries.shape
        S = keys.shape[1]
        out = self.inner_attention(self.query_projection(queries).view(B, L, HEADS, -1),
                                   self.key_projection(keys).view(B, S, HEADS, -1),
                                   self.value_projection(values).view(B, S, HEADS, -1), index_sample)
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        return self.out_projection(out.view(B, L, -1))


class ConvLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.downConv = nn.Conv1d(D, D, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(D)
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.maxPool(F.elu(self.norm(self.downConv(x.permute(0, 2, 1))))).transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, attention, cross=None):
        super().__init__()
        self.attention, self.cross = attention, cross
        self.conv1, self.conv2 = nn.Conv1d(D, 4 * D, 1), nn.Conv1d(4 * D, D, 1)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x, index_sample, memory=None):
        x = self.norm1(x + self.attention(x, x, x, index_sample))
        if self.cross is not None:
            x = self.norm3(x + self.cross(x, memory, memory, index_sample))
        y = self.conv2(F.gelu(self.conv1(x.transpose(-1, 1)))).transpose(-1, 1)
        return self.norm2(x + y)


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokenConv = nn.Conv1d(CH, D, kernel_size=3, padding=1, padding_mode="circular")
        self.temporal = nn.Linear(4, D)
        position = torch.arange(0, SEQ).float().unsqueeze(1)
        div_term = (torch.arange(0, D, 2).float() * -(np.log(10000.0) / D)).exp()
        pe = torch.zeros(SEQ, D)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x, x_mark):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2) + self.pe[:, :x.size(1)] + self.temporal(x_mark)


class Informer(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc_embedding, self.dec_embedding = Embedding(), Embedding()
        self.encoder = nn.ModuleList([EncoderLayer(AttentionLayer(ProbAttention(False))) for _ in range(2)])
        self.distil = ConvLayer()
        self.enc_norm = nn.LayerNorm(D)
        self.decoder = EncoderLayer(AttentionLayer(ProbAttention(True), mix=True), AttentionLayer(FullAttention()))
        self.dec_norm = nn.LayerNorm(D)
        self.projection = nn.Linear(D, CH)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, index_sample):
        enc = self.encoder[0](self.enc_embedding(x_enc, x_mark_enc), index_sample)
        enc = self.enc_norm(self.encoder[1](self.distil(enc), index_sample))
        dec = self.decoder(self.dec_embedding(x_dec, x_mark_dec), index_sample, enc)
        return self.projection(self.dec_norm(dec))[:, -PRED:, :]


class Program:
    def __init__(self, compile):
        self.r = r = rng(NAME)
        t = np.arange(2000)
        series = np.stack([np.sin(2 * np.pi * t / p) for p in (24, 168, 12, 48, 7, 30, 60)], 1)
        series = (series + 0.1 * r.standard_normal(series.shape)).astype(np.float32)
        stamp = np.stack([(t % 24) / 23 - .5, (t // 24 % 7) / 6 - .5, (t // 24 % 30) / 29 - .5,
                          (t // 720 % 12) / 11 - .5], 1).astype(np.float32)
        self.batches = []
        for _ in range(4):
            starts = r.integers(0, len(t) - SEQ - PRED, BATCH)
            x = np.stack([series[s:s + SEQ] for s in starts])
            y = np.stack([series[s + SEQ - LABEL:s + SEQ + PRED] for s in starts])
            xm = np.stack([stamp[s:s + SEQ] for s in starts])
            ym = np.stack([stamp[s + SEQ - LABEL:s + SEQ + PRED] for s in starts])
            self.batches.append(tuple(torch.from_numpy(a) for a in (x, y, xm, ym)))
        self.model = Informer()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.i = 0

    def step(self) -> float:
        x, y, xm, ym = self.batches[self.i % len(self.batches)]
        self.i += 1
        dec_inp = torch.cat([y[:, :LABEL, :], torch.zeros(BATCH, PRED, CH)], dim=1)
        index_sample = torch.from_numpy(self.r.integers(0, 10 ** 6, (SEQ, SEQ)))
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.forward(x, xm, dec_inp, ym, index_sample), y[:, -PRED:, :])
        loss.backward()
        self.optimizer.step()
        return loss.item()
