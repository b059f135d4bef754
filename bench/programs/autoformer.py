"""Autoformer forecasting (the paper repository's layers): series decomposition and
Auto-Correlation.

A batch of 32 windows of a 7-channel series: 96 steps in, a decoder seeded with the
last 48 steps' seasonal and trend parts and 24 placeholders. Series decomposition by a
moving average of 25 (ends replicated by ``repeat``, ``nn.AvgPool1d``) after every
sublayer; Auto-Correlation (width 64, 4 heads): period correlations by ``torch.fft.rfft``
of queries times conjugate keys and ``irfft``, the top int(ln L) delays by ``topk`` per
channel, values aggregated by ``gather`` from the values repeated twice. Two encoder
layers, one decoder layer accumulating trends through a circular Conv1d, MSE, Adam.
Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "autoformer"
BATCH, SEQ, LABEL, PRED, CH, D, HEADS, KERNEL = 32, 96, 48, 24, 7, 64, 4, 25


class SeriesDecomp(nn.Module):
    def __init__(self):
        super().__init__()
        self.avg = nn.AvgPool1d(kernel_size=KERNEL, stride=1, padding=0)

    def forward(self, x):
        front = x[:, 0:1, :].repeat(1, (KERNEL - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (KERNEL - 1) // 2, 1)
        moving_mean = self.avg(torch.cat([front, x, end], dim=1).permute(0, 2, 1)).permute(0, 2, 1)
        return x - moving_mean, moving_mean


def time_delay_agg(values, corr):
    batch, head, channel, length = values.shape
    init_index = torch.arange(length).view(1, 1, 1, -1).repeat(batch, head, channel, 1)
    top_k = int(math.log(length))
    weights, delay = torch.topk(corr, top_k, dim=-1)
    tmp_corr = torch.softmax(weights, dim=-1)
    tmp_values = values.repeat(1, 1, 1, 2)
    delays_agg = torch.zeros_like(values)
    for i in range(top_k):
        pattern = torch.gather(tmp_values, dim=-1, index=init_index + delay[..., i].unsqueeze(-1))
        delays_agg = delays_agg + pattern * tmp_corr[..., i].unsqueeze(-1)
    return delays_agg


class AutoCorrelationLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.query_projection, self.key_projection = nn.Linear(D, D), nn.Linear(D, D)
        self.value_projection, self.out_projection = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, queries, keys, values):
        B, L, _ = queries.shape
        S = keys.shape[1]
        q = self.query_projection(queries).view(B, L, HEADS, -1)
        k = self.key_projection(keys).view(B, S, HEADS, -1)
        v = self.value_projection(values).view(B, S, HEADS, -1)
        if L > S:
            zeros = torch.zeros_like(q[:, :(L - S)])
            v, k = torch.cat([v, zeros], dim=1), torch.cat([k, zeros], dim=1)
        else:
            v, k = v[:, :L], k[:, :L]
        q_fft = torch.fft.rfft(q.permute(0, 2, 3, 1).contiguous(), dim=-1)
        k_fft = torch.fft.rfft(k.permute(0, 2, 3, 1).contiguous(), dim=-1)
        corr = torch.fft.irfft(q_fft * torch.conj(k_fft), n=L, dim=-1)
        out = time_delay_agg(v.permute(0, 2, 3, 1).contiguous(), corr).permute(0, 3, 1, 2)
        return self.out_projection(out.reshape(B, L, -1))


class SeasonalNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.layernorm = nn.LayerNorm(D)

    def forward(self, x):
        x_hat = self.layernorm(x)
        return x_hat - torch.mean(x_hat, dim=1, keepdim=True)


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokenConv = nn.Conv1d(CH, D, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        self.temporal = nn.Linear(4, D, bias=False)

    def forward(self, x, x_mark):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2) + self.temporal(x_mark)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = AutoCorrelationLayer()
        self.conv1, self.conv2 = nn.Conv1d(D, 4 * D, 1, bias=False), nn.Conv1d(4 * D, D, 1, bias=False)
        self.decomp1, self.decomp2 = SeriesDecomp(), SeriesDecomp()

    def forward(self, x):
        x, _ = self.decomp1(x + self.attention(x, x, x))
        y = self.conv2(F.gelu(self.conv1(x.transpose(-1, 1)))).transpose(-1, 1)
        return self.decomp2(x + y)[0]


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attention, self.cross_attention = AutoCorrelationLayer(), AutoCorrelationLayer()
        self.conv1, self.conv2 = nn.Conv1d(D, 4 * D, 1, bias=False), nn.Conv1d(4 * D, D, 1, bias=False)
        self.decomp1, self.decomp2, self.decomp3 = SeriesDecomp(), SeriesDecomp(), SeriesDecomp()
        self.projection = nn.Conv1d(D, CH, kernel_size=3, padding=1, padding_mode="circular", bias=False)

    def forward(self, x, cross):
        x, trend1 = self.decomp1(x + self.self_attention(x, x, x))
        x, trend2 = self.decomp2(x + self.cross_attention(x, cross, cross))
        y = self.conv2(F.relu(self.conv1(x.transpose(-1, 1)))).transpose(-1, 1)
        x, trend3 = self.decomp3(x + y)
        return x, self.projection((trend1 + trend2 + trend3).permute(0, 2, 1)).transpose(1, 2)


class Autoformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.decomp = SeriesDecomp()
        self.enc_embedding, self.dec_embedding = Embedding(), Embedding()
        self.encoder = nn.ModuleList([EncoderLayer() for _ in range(2)])
        self.enc_norm, self.dec_norm = SeasonalNorm(), SeasonalNorm()
        self.decoder = DecoderLayer()
        self.projection = nn.Linear(D, CH)

    def forward(self, x_enc, x_mark_enc, x_mark_dec):
        mean = torch.mean(x_enc, dim=1, keepdim=True).repeat(1, PRED, 1)
        seasonal_init, trend_init = self.decomp(x_enc)
        trend_init = torch.cat([trend_init[:, -LABEL:], mean], dim=1)
        seasonal_init = torch.cat([seasonal_init[:, -LABEL:], torch.zeros_like(mean)], dim=1)
        enc = self.enc_embedding(x_enc, x_mark_enc)
        for layer in self.encoder:
            enc = layer(enc)
        x, residual_trend = self.decoder(self.dec_embedding(seasonal_init, x_mark_dec), self.enc_norm(enc))
        return (trend_init + residual_trend + self.projection(self.dec_norm(x)))[:, -PRED:]


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        t = np.arange(2000)
        series = np.stack([np.sin(2 * np.pi * t / p) for p in (24, 168, 12, 48, 7, 30, 60)], 1)
        series = (series + 0.1 * r.standard_normal(series.shape)).astype(np.float32)
        stamp = np.stack([(t % 24) / 23 - .5, (t // 24 % 7) / 6 - .5, (t // 24 % 30) / 29 - .5,
                          (t // 720 % 12) / 11 - .5], 1).astype(np.float32)
        self.batches = []
        for _ in range(4):
            starts = r.integers(0, len(t) - SEQ - PRED, BATCH)
            x = np.stack([series[s:s + SEQ] for s in starts])
            y = np.stack([series[s + SEQ:s + SEQ + PRED] for s in starts])
            xm = np.stack([stamp[s:s + SEQ] for s in starts])
            ym = np.stack([stamp[s + SEQ - LABEL:s + SEQ + PRED] for s in starts])
            self.batches.append(tuple(torch.from_numpy(a) for a in (x, y, xm, ym)))
        self.model = Autoformer()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.i = 0

    def step(self) -> float:
        x, y, xm, ym = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.forward(x, xm, ym), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()
