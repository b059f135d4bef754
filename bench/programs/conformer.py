"""A Conformer CTC recognizer (Gulati et al. 2020) as wenet and torchaudio write it.

80 log-mel bins of 200 frames (batch 8, lengths 120-200) through Conv2d subsampling by 4,
then four Conformer layers of width 144 (4 heads): half-step (macaron) feed-forwards with
SiLU, ``nn.MultiheadAttention`` with a key padding mask from the lengths, the convolution
module (LayerNorm, pointwise Conv1d to 2x, GLU over channels, depthwise Conv1d of kernel
15, BatchNorm1d, SiLU, pointwise), a final LayerNorm; wenet's CTC module computes
``nn.CTCLoss(reduction="sum")`` over padded targets divided by the batch inside the
forward, which returns a dict. Adam under a Noam warmup (LambdaLR), ``clip_grad_norm_``.
Compiled: the model, loss included.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "conformer"
BATCH, N_MELS, FRAMES, D, HEADS, FFN, LAYERS, KERNEL, VOCAB, LABELS = 8, 80, 200, 144, 4, 576, 4, 15, 32, 20


class FeedForwardModule(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.sequential = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, hidden), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Linear(hidden, d), nn.Dropout(0.0))

    def forward(self, x):
        return self.sequential(x)


class ConvolutionModule(nn.Module):
    def __init__(self, d, kernel_size):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d)
        self.sequential = nn.Sequential(
            nn.Conv1d(d, 2 * d, 1), nn.GLU(dim=1),
            nn.Conv1d(d, d, kernel_size, padding=(kernel_size - 1) // 2, groups=d),
            nn.BatchNorm1d(d), nn.SiLU(), nn.Conv1d(d, d, 1), nn.Dropout(0.0))

    def forward(self, x):
        return self.sequential(self.layer_norm(x).transpose(1, 2)).transpose(1, 2)


class ConformerLayer(nn.Module):
    def __init__(self, d, ffn_dim, heads, kernel_size):
        super().__init__()
        self.ffn1, self.ffn2 = FeedForwardModule(d, ffn_dim), FeedForwardModule(d, ffn_dim)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv_module = ConvolutionModule(d, kernel_size)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x, key_padding_mask):
        x = 0.5 * self.ffn1(x) + x
        residual = x
        x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = x + residual
        x = x + self.conv_module(x)
        x = 0.5 * self.ffn2(x) + x
        return self.final_layer_norm(x)


class CTC(nn.Module):
    def __init__(self, odim, encoder_output_size):
        super().__init__()
        self.ctc_lo = nn.Linear(encoder_output_size, odim)
        self.ctc_loss = nn.CTCLoss(reduction="sum", zero_infinity=True)

    def forward(self, hs_pad, hlens, ys_pad, ys_lens):
        ys_hat = self.ctc_lo(hs_pad).transpose(0, 1).log_softmax(2)
        return self.ctc_loss(ys_hat, ys_pad, hlens, ys_lens) / ys_hat.size(1)


class ConformerCTC(nn.Module):
    def __init__(self):
        super().__init__()
        self.subsample = nn.Sequential(nn.Conv2d(1, D, 3, 2), nn.ReLU(), nn.Conv2d(D, D, 3, 2), nn.ReLU())
        self.out = nn.Linear(D * (((N_MELS - 1) // 2 - 1) // 2), D)
        self.layers = nn.ModuleList([ConformerLayer(D, FFN, HEADS, KERNEL) for _ in range(LAYERS)])
        self.ctc = CTC(VOCAB, D)

    def forward(self, feats, lengths, ys_pad, ys_lens):
        x = self.subsample(feats.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        lengths = ((lengths - 1) // 2 - 1) // 2
        mask = torch.arange(t, device=x.device)[None, :] >= lengths[:, None]
        for layer in self.layers:
            x = layer(x, mask)
        loss = self.ctc(x, lengths, ys_pad, ys_lens)
        return {"loss": loss, "loss_ctc": loss.detach()}


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = ConformerCTC()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: 2.0 * D ** -0.5 * min((s + 1) ** -0.5, (s + 1) * 25 ** -1.5))
        self.forward = compile(self.model)

    def step(self) -> float:
        lengths = self.r.integers(120, FRAMES + 1, BATCH)
        feats = self.r.standard_normal((BATCH, FRAMES, N_MELS)).astype("float32")
        feats *= (np.arange(FRAMES)[None, :, None] < lengths[:, None, None])
        ys_lens = self.r.integers(LABELS // 2, LABELS + 1, BATCH)
        ys_pad = self.r.integers(1, VOCAB, (BATCH, LABELS)) * (np.arange(LABELS)[None, :] < ys_lens[:, None])
        self.model.train()
        out = self.forward(torch.from_numpy(feats), torch.from_numpy(lengths), torch.from_numpy(ys_pad),
                           torch.from_numpy(ys_lens))
        self.optimizer.zero_grad()
        out["loss"].backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.optimizer.step()
        self.scheduler.step()
        return out["loss_ctc"].item()
