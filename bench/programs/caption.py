"""Image captioning: a CNN encoder and nn.TransformerDecoder, as the captioning tutorials
write it.

Two stride-2 Conv2d + BatchNorm + GELU stages turn 32x32 images into an 8x8 feature map,
flattened into a 64-token memory (width 128); captions (up to 20 tokens, padded) are
embedded with sinusoidal positions and decoded by 3 ``nn.TransformerDecoderLayer``s
(``batch_first``, ``norm_first``, 4 heads, GELU) under the causal mask from
``nn.Transformer.generate_square_subsequent_mask`` with ``tgt_is_causal`` and the padding
as ``tgt_key_padding_mask``; cross-entropy with label smoothing ignoring the padding,
AdamW, ``clip_grad_norm_``. Batch 16. Compiled: the model.
"""
import math

import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "caption"
PAD, BOS, EOS, VOCAB, D, MAXLEN, BATCH = 0, 1, 2, 500, 128, 20, 16


class Captioner(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(3, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.GELU(),
                                 nn.Conv2d(64, D, 3, stride=2, padding=1), nn.BatchNorm2d(D), nn.GELU())
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        position = torch.arange(MAXLEN).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
        pe = torch.zeros(1, MAXLEN, D)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        layer = nn.TransformerDecoderLayer(D, 4, dim_feedforward=4 * D, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, 3, norm=nn.LayerNorm(D))
        self.fc = nn.Linear(D, VOCAB)

    def forward(self, images, captions):
        memory = self.cnn(images).flatten(2).permute(0, 2, 1)
        T = captions.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        x = self.embed(captions) * math.sqrt(D) + self.pe[:, :T]
        out = self.decoder(x, memory, tgt_mask=mask, tgt_key_padding_mask=captions == PAD, tgt_is_causal=True)
        return self.fc(out)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            images = torch.from_numpy(r.standard_normal((BATCH, 3, 32, 32)).astype("float32"))
            caps = torch.full((BATCH, MAXLEN + 1), PAD, dtype=torch.long)
            for i in range(BATCH):
                n = int(r.integers(8, MAXLEN))
                caps[i, 0], caps[i, n] = BOS, EOS
                caps[i, 1:n] = torch.from_numpy(r.integers(3, VOCAB, n - 1))
            self.batches.append((images, caps))
        self.model = Captioner()
        load_params(NAME, self.model)
        self.criterion = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=1e-2)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        images, caps = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        logits = self.forward(images, caps[:, :-1])
        loss = self.criterion(logits.reshape(-1, VOCAB), caps[:, 1:].reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()
