"""Speech recognition with CTC, as AssemblyAI's "Building an end-to-end Speech
Recognition model in PyTorch" (a DeepSpeech2-style network) writes it.

A spectrogram (batch 8, 1, 64 mel bins, 200 frames) through a strided Conv2d and a
``CNNLayerNorm``, flattened to (batch, features, time) for a Conv1d front end (BatchNorm1d,
``Hardtanh(0, 20)`` in place), three bidirectional ``nn.GRU`` layers (batch_first, each
after LayerNorm and GELU), a classifier over 29 characters; ``log_softmax`` over the
classes, transposed to (time, batch, class) for ``nn.CTCLoss(blank=28)`` with per-sample
input and label lengths; AdamW, ``clip_grad_norm_``, OneCycleLR. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "ctc"
BATCH, N_MELS, FRAMES, N_CLASS, RNN_DIM = 8, 64, 200, 29, 128


class CNNLayerNorm(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.layer_norm = nn.LayerNorm(n_feats)

    def forward(self, x):
        x = x.transpose(2, 3).contiguous()    # (batch, channel, time, feature)
        x = self.layer_norm(x)
        return x.transpose(2, 3).contiguous()


class BidirectionalGRU(nn.Module):
    def __init__(self, rnn_dim, hidden_size, dropout, batch_first):
        super().__init__()
        self.BiGRU = nn.GRU(input_size=rnn_dim, hidden_size=hidden_size, num_layers=1,
                            batch_first=batch_first, bidirectional=True)
        self.layer_norm = nn.LayerNorm(rnn_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.layer_norm(x)
        x = F.gelu(x)
        x, _ = self.BiGRU(x)
        return self.dropout(x)


class SpeechRecognitionModel(nn.Module):
    def __init__(self, n_rnn_layers=3, rnn_dim=RNN_DIM, n_class=N_CLASS, n_feats=N_MELS, stride=2):
        super().__init__()
        n_feats = n_feats // 2
        self.cnn = nn.Conv2d(1, 16, 3, stride=stride, padding=3 // 2)
        self.norm = CNNLayerNorm(n_feats)
        self.front = nn.Sequential(nn.Conv1d(16 * n_feats, rnn_dim, kernel_size=5, padding=2),
                                   nn.BatchNorm1d(rnn_dim), nn.Hardtanh(0, 20, inplace=True))
        self.birnn_layers = nn.Sequential(*[
            BidirectionalGRU(rnn_dim=rnn_dim if i == 0 else rnn_dim * 2, hidden_size=rnn_dim,
                             dropout=0.0, batch_first=True) for i in range(n_rnn_layers)])
        self.classifier = nn.Sequential(nn.Linear(rnn_dim * 2, rnn_dim), nn.GELU(), nn.Dropout(0.0),
                                        nn.Linear(rnn_dim, n_class))

    def forward(self, x):
        x = self.norm(self.cnn(x))
        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])   # (batch, feature, time)
        x = self.front(x).transpose(1, 2)                     # (batch, time, feature)
        x = self.birnn_layers(x)
        return self.classifier(x)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            spec = torch.from_numpy(r.standard_normal((BATCH, 1, N_MELS, FRAMES)).astype(np.float32))
            label_lengths = [int(n) for n in r.integers(20, 40, BATCH)]
            labels = torch.from_numpy(np.stack([np.pad(r.integers(0, N_CLASS - 1, n), (0, 40 - n))
                                                for n in label_lengths]))
            input_lengths = [int(n) for n in r.integers(FRAMES // 2 - 20, FRAMES // 2 + 1, BATCH)]
            self.batches.append((spec, labels, input_lengths, label_lengths))
        self.model = SpeechRecognitionModel()
        load_params(NAME, self.model)
        self.criterion = nn.CTCLoss(blank=N_CLASS - 1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), 5e-4)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=5e-4, steps_per_epoch=100,
                                                             epochs=10, anneal_strategy='linear')
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        spectrograms, labels, input_lengths, label_lengths = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        output = self.forward(spectrograms)      # (batch, time, n_class)
        output = F.log_softmax(output, dim=2)
        output = output.transpose(0, 1)          # (time, batch, n_class)
        loss = self.criterion(output, labels, input_lengths, label_lengths)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()
