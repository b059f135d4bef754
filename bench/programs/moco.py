"""MoCo v2 pre-training steps, as facebookresearch/moco's builder.py writes them.

A small CNN encoder (four 3x3 conv + BatchNorm + ReLU stages, global pooling, the v2 MLP
head to 128) as the query encoder and a deep copy as the key encoder, updated as
``param_k.data = param_k.data * m + param_q.data * (1 - m)`` inside the forward; a queue
of negatives kept as a buffer and filled at ``int(self.queue_ptr)``; logits by
einsum over normalized embeddings / 0.2, cross-entropy against label 0; SGD with
momentum. Batch 64 of two views of 32x32 images (noise and flips from numpy). Compiled:
the whole MoCo module. The queue holds 4 batches (the paper's 65536 / 256 would be 256):
the pointer, read by int(), takes 4 values, one capture each, all made in the warm-up.
torch.compile cannot run it (UNSUPPORTED in __init__.py).
"""
import copy

import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "moco"
BATCH, DIM, K = 64, 128, 256


def encoder():
    layers, c = [], 3
    for w, s in ((32, 1), (64, 2), (128, 2), (128, 2)):
        layers += [nn.Conv2d(c, w, 3, stride=s, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
        c = w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(c, c), nn.ReLU(), nn.Linear(c, DIM))


class MoCo(nn.Module):
    def __init__(self, m=0.999, T=0.2):
        super().__init__()
        self.m, self.T = m, T
        self.encoder_q = encoder()
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for param_k in self.encoder_k.parameters():
            param_k.requires_grad = False
        queue = rng(NAME, "queue").standard_normal((DIM, K)).astype(np.float32)
        self.register_buffer("queue", nn.functional.normalize(torch.from_numpy(queue), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        self.queue_ptr[0] = (ptr + batch_size) % K

    def forward(self, im_q, im_k):
        q = nn.functional.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = nn.functional.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        images = r.random((4, BATCH, 3, 32, 32))
        self.views = [[torch.from_numpy((x[..., ::-1] if j else x) + 0.1 * r.standard_normal(x.shape)).float()
                       for j in range(2)] for x in images]
        self.model = MoCo()
        load_params(NAME, self.model)
        self.model.encoder_k.load_state_dict(self.model.encoder_q.state_dict())
        self.forward = compile(self.model)
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), 0.03, momentum=0.9, weight_decay=1e-4)
        self.i = 0

    def step(self) -> float:
        im_q, im_k = self.views[self.i % len(self.views)]
        self.i += 1
        output, target = self.forward(im_q, im_k)
        loss = self.criterion(output, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
