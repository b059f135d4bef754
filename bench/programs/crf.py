"""BiLSTM-CRF named-entity tagger, batched, as the popular pytorch-crf module and the
taggers built on it write it.

Embedding (padding 0), a bidirectional ``nn.LSTM`` (batch_first), a Linear to 9 tags
(CoNLL's BIO set), and a CRF layer: start, end and transition parameters; the gold
path's score by ``gather`` and indexing of the transitions, the partition function by
the forward algorithm (``logsumexp`` over a broadcast sum, ``torch.where`` on the mask)
in a Python loop over the 30 positions; the negative log-likelihood's mean, Adam.
Batch 32 of sentences 8 to 30 tokens long, vocabulary 5000, width 64. Compiled: the
model (its forward is the loss).
"""
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "crf"
VOCAB, EMB, HID, TAGS, BATCH, LENGTH = 5000, 64, 64, 9, 32, 30


class BiLSTMCRF(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMB, padding_idx=0)
        self.lstm = nn.LSTM(EMB, HID, batch_first=True, bidirectional=True)
        self.hidden2tag = nn.Linear(2 * HID, TAGS)
        self.start_transitions = nn.Parameter(torch.empty(TAGS))
        self.end_transitions = nn.Parameter(torch.empty(TAGS))
        self.transitions = nn.Parameter(torch.empty(TAGS, TAGS))

    def _compute_score(self, emissions, tags, mask):
        batch_size, seq_length = tags.shape
        score = self.start_transitions[tags[:, 0]]
        score = score + emissions[:, 0].gather(1, tags[:, 0:1]).squeeze(1)
        for i in range(1, seq_length):
            score = score + self.transitions[tags[:, i - 1], tags[:, i]] * mask[:, i]
            score = score + emissions[:, i].gather(1, tags[:, i:i + 1]).squeeze(1) * mask[:, i]
        seq_ends = mask.long().sum(dim=1) - 1
        last_tags = tags.gather(1, seq_ends.unsqueeze(1)).squeeze(1)
        return score + self.end_transitions[last_tags]

    def _compute_normalizer(self, emissions, mask):
        score = self.start_transitions + emissions[:, 0]
        for i in range(1, emissions.size(1)):
            broadcast_score = score.unsqueeze(2)
            broadcast_emissions = emissions[:, i].unsqueeze(1)
            next_score = broadcast_score + self.transitions + broadcast_emissions
            next_score = torch.logsumexp(next_score, dim=1)
            score = torch.where(mask[:, i].unsqueeze(1).bool(), next_score, score)
        score = score + self.end_transitions
        return torch.logsumexp(score, dim=1)

    def forward(self, sentences, tags, mask):
        out, _ = self.lstm(self.embedding(sentences))
        emissions = self.hidden2tag(out)
        numerator = self._compute_score(emissions, tags, mask.float())
        denominator = self._compute_normalizer(emissions, mask)
        return (denominator - numerator).mean()


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            lengths = r.integers(8, LENGTH + 1, BATCH)
            lengths[0] = LENGTH
            x = torch.zeros(BATCH, LENGTH, dtype=torch.long)
            y = torch.zeros(BATCH, LENGTH, dtype=torch.long)
            for b, n in enumerate(lengths):
                x[b, :n] = torch.from_numpy(r.integers(1, VOCAB, n))
                y[b, :n] = torch.from_numpy(r.integers(0, TAGS, n))
            self.batches.append((x, y, x != 0))
        self.model = BiLSTMCRF()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        x, y, mask = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.optimizer.zero_grad()
        loss = self.forward(x, y, mask)
        loss.backward()
        self.optimizer.step()
        return loss.item()
