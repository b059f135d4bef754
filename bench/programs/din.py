"""Deep Interest Network (Zhou et al.), as DeepCTR-Torch writes its attention pooling.

A candidate item (item and category embeddings, 16 each) attends over the user's behaviour
sequence of 50 padded clicks through a local activation unit: an MLP (80, 40) with Dice
activations (BatchNorm without affine between transposes, then a learned mix of x and
sigmoid-gated x) on [q, k, q - k, q * k]; padding masked by ``arange < lengths`` and
``torch.where``, the weighted keys summed by matmul. The interest beside user-profile
embeddings and a dense feature feeds an MLP (200, 80) with Dice; BCEWithLogits plus an L2
term on the looked-up embeddings, Adam. Batch 256. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "din"
ITEMS, CATS, USERS, EMB, SEQ, BATCH = 2000, 50, 500, 16, 50, 256


class Dice(nn.Module):
    def __init__(self, size, dim=2):
        super().__init__()
        self.bn = nn.BatchNorm1d(size, eps=1e-8, affine=False)
        self.dim = dim
        self.alpha = nn.Parameter(torch.zeros((size,)) if dim == 2 else torch.zeros((size, 1)))

    def forward(self, x):
        if self.dim == 3:
            x = torch.transpose(x, 1, 2)
        x_p = torch.sigmoid(self.bn(x))
        out = self.alpha * (1 - x_p) * x + x_p * x
        return torch.transpose(out, 1, 2) if self.dim == 3 else out


def mlp(width, hidden, dim):
    layers = []
    for h in hidden:
        layers += [nn.Linear(width, h), Dice(h, dim)]
        width = h
    return nn.Sequential(*layers), width


class DIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_emb = nn.Embedding(ITEMS + 1, EMB, padding_idx=0)
        self.cat_emb = nn.Embedding(CATS + 1, EMB, padding_idx=0)
        self.user_emb = nn.Embedding(USERS, EMB)
        self.att_dnn, width = mlp(8 * EMB, (80, 40), 3)
        self.att_dense = nn.Linear(width, 1)
        self.dnn, width = mlp(5 * EMB + 1, (200, 80), 2)
        self.out = nn.Linear(width, 1)

    def forward(self, user, dense, item, cat, hist_item, hist_cat, hist_len):
        query = torch.cat([self.item_emb(item), self.cat_emb(cat)], -1).unsqueeze(1)
        keys = torch.cat([self.item_emb(hist_item), self.cat_emb(hist_cat)], -1)
        batch_size, max_length, _ = keys.size()
        queries = query.expand(-1, max_length, -1)
        att = self.att_dense(self.att_dnn(torch.cat([queries, keys, queries - keys, queries * keys], dim=-1)))
        keys_masks = torch.arange(max_length, dtype=hist_len.dtype).repeat(batch_size, 1) < hist_len.view(-1, 1)
        scores = torch.where(keys_masks.unsqueeze(1), torch.transpose(att, 1, 2), torch.zeros_like(att).transpose(1, 2))
        interest = torch.matmul(scores, keys).squeeze(1)
        user_e = self.user_emb(user)
        logit = self.out(self.dnn(torch.cat([user_e, interest, query.squeeze(1), dense.unsqueeze(-1)], -1)))
        reg = (query.pow(2).sum() + keys.pow(2).sum() + user_e.pow(2).sum()) / BATCH
        return logit.squeeze(-1), reg


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        item_cat = r.integers(1, CATS + 1, ITEMS + 1)
        item_cat[0] = 0
        lengths = r.integers(1, SEQ + 1, BATCH)
        hist = r.integers(1, ITEMS + 1, (BATCH, SEQ)) * (np.arange(SEQ)[None] < lengths[:, None])
        item = r.integers(1, ITEMS + 1, BATCH)
        self.batch = dict(user=torch.from_numpy(r.integers(0, USERS, BATCH)),
                          dense=torch.from_numpy(r.standard_normal(BATCH).astype("float32")),
                          item=torch.from_numpy(item), cat=torch.from_numpy(item_cat[item]),
                          hist_item=torch.from_numpy(hist), hist_cat=torch.from_numpy(item_cat[hist]),
                          hist_len=torch.from_numpy(lengths))
        self.y = torch.from_numpy((r.random(BATCH) < 0.3).astype("float32"))
        self.model = DIN()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.loss_fn = nn.BCEWithLogitsLoss()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def step(self) -> float:
        logit, reg = self.forward(**self.batch)
        loss = self.loss_fn(logit, self.y) + 1e-5 * reg
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()
