"""Sentence classification with Kim (2014)'s CNN, as the popular tutorials write it
(bentrevett's "Convolutional Sentiment Analysis", Shawn1993/cnn-text-classification).

An ``nn.Embedding`` of 20,000 words, width 128, three ``Conv2d`` of 100 filters spanning 3,
4 and 5 words, ReLU, max-over-time pooling by ``F.max_pool1d`` over the whole length,
concatenation, dropout (0 here: the frameworks draw different masks) and a Linear to one
logit; BCEWithLogitsLoss, Adam. One step is a batch of 64 sentences padded to 50 tokens.
Compiled: the model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "textcnn"
VOCAB, EMBED, FILTERS, SIZES, BATCH, LENGTH = 20000, 128, 100, (3, 4, 5), 64, 50


class CNN(nn.Module):
    def __init__(self, vocab_size, embedding_dim, n_filters, filter_sizes, output_dim, dropout, pad_idx):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_idx)
        self.convs = nn.ModuleList([nn.Conv2d(in_channels=1, out_channels=n_filters,
                                              kernel_size=(fs, embedding_dim)) for fs in filter_sizes])
        self.fc = nn.Linear(len(filter_sizes) * n_filters, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, text):
        embedded = self.embedding(text).unsqueeze(1)                 # (batch, 1, len, emb)
        conved = [F.relu(conv(embedded)).squeeze(3) for conv in self.convs]
        pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]
        cat = self.dropout(torch.cat(pooled, dim=1))
        return self.fc(cat)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = CNN(VOCAB, EMBED, FILTERS, SIZES, 1, 0.0, 0)
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.criterion = nn.BCEWithLogitsLoss()
        self.forward = compile(self.model)

    def step(self) -> float:
        lengths = self.r.integers(10, LENGTH + 1, BATCH)
        tokens = self.r.integers(1, VOCAB, (BATCH, LENGTH)) * (lengths[:, None] > range(LENGTH))
        text = torch.from_numpy(tokens)
        label = torch.from_numpy((self.r.random(BATCH) < 0.5).astype("float32"))
        self.model.train()
        self.optimizer.zero_grad()
        predictions = self.forward(text).squeeze(1)
        loss = self.criterion(predictions, label)
        acc = ((torch.sigmoid(predictions) > 0.5).float() == label).float().mean()
        loss.backward()
        self.optimizer.step()
        self.accuracy = acc.item()
        return loss.item()
