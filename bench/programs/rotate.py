"""RotatE knowledge-graph embeddings on complex tensors (the KnowledgeGraphEmbedding repo's
training step, written with torch's complex ops).

2000 entities and 16 relations of width 64; entities stored as (n, 64, 2) floats read by
``torch.view_as_complex``, relations as phases turned into rotations by ``torch.polar``;
a batch of 256 positive triples against 64 corrupted heads or tails (alternating), scores
``gamma - |h * r - t|`` summed over the width (``.abs()`` of complex), self-adversarial
negative weights (a detached softmax) on ``F.logsigmoid`` margins, Adam. Every op on the
scores' path is complex until the ``abs``. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "rotate"
ENTITIES, RELATIONS, DIM, BATCH, NEGATIVES, GAMMA = 2000, 16, 64, 256, 64, 9.0


class RotatE(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_range = (GAMMA + 2.0) / DIM
        self.entity_embedding = nn.Parameter(torch.zeros(ENTITIES, DIM, 2))
        self.relation_embedding = nn.Parameter(torch.zeros(RELATIONS, DIM))

    def forward(self, positive, negative, mode: str):
        batch, k = negative.shape
        relation = self.relation_embedding[positive[:, 1]].unsqueeze(1)
        ent = torch.view_as_complex(self.entity_embedding)
        phase = relation / (self.embedding_range / np.pi)
        rotation = torch.polar(torch.ones_like(phase), phase)
        if mode == "head-batch":
            head = ent[negative.view(-1)].view(batch, k, DIM)
            tail = ent[positive[:, 2]].unsqueeze(1)
            score = rotation.conj() * tail - head
        else:
            head = ent[positive[:, 0]].unsqueeze(1)
            tail = ent[negative.view(-1)].view(batch, k, DIM)
            score = head * rotation - tail
        neg = GAMMA - score.abs().sum(dim=2)
        h, t = ent[positive[:, 0]], ent[positive[:, 2]]
        pos = GAMMA - (h * rotation.squeeze(1) - t).abs().sum(dim=1)
        return pos, neg


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        heads = r.integers(0, ENTITIES, 20000)
        rels = r.integers(0, RELATIONS, 20000)
        tails = (heads * (rels + 3) + 7 * rels) % ENTITIES
        self.triples = np.stack([heads, rels, tails], 1)
        self.model = RotatE()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.batches = [(torch.from_numpy(self.triples[r.integers(0, len(self.triples), BATCH)]),
                         torch.from_numpy(r.integers(0, ENTITIES, (BATCH, NEGATIVES)))) for _ in range(4)]
        self.i = 0

    def step(self) -> float:
        positive, negative = self.batches[self.i % len(self.batches)]
        mode = "head-batch" if self.i % 2 == 0 else "tail-batch"
        self.i += 1
        self.optimizer.zero_grad()
        pos, neg = self.forward(positive, negative, mode)
        neg = (F.softmax(neg, dim=1).detach() * F.logsigmoid(-neg)).sum(dim=1)
        loss = -(F.logsigmoid(pos).mean() + neg.mean()) / 2
        loss.backward()
        self.optimizer.step()
        return loss.item()
