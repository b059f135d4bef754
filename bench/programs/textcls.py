"""Text classification with an EmbeddingBag, as the PyTorch text tutorial ("Text
classification with the torchtext library") writes it.

A ``DataLoader`` over (label, token ids) pairs with the tutorial's ``collate_batch`` (a
``torch.tensor`` per text, the offsets by ``cumsum``, ``torch.cat``), an
``nn.EmbeddingBag`` (mean) of AG_NEWS's vocabulary size and width 64, a Linear to 4
classes; CrossEntropyLoss, SGD(lr=5), ``clip_grad_norm_(0.1)``, and the tutorial's
accuracy count. One step is one batch of 64 texts of 10 to 60 tokens (a fixed set of 8
batches, so a compiled model sees a few shapes, then none new). Compiled: the model.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader

from .common import load_params, rng

NAME = "textcls"
VOCAB, EMSIZE, NUM_CLASS, BATCH_SIZE, BATCHES = 95811, 64, 4, 64, 8


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(_label)
        processed_text = torch.tensor(_text, dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        items = [(int(r.integers(0, NUM_CLASS)), [int(t) for t in r.integers(1, VOCAB, int(r.integers(10, 61)))])
                 for _ in range(BATCH_SIZE * BATCHES)]
        self.dataloader = DataLoader(items, batch_size=BATCH_SIZE, shuffle=False, collate_fn=collate_batch)
        self.batches = iter(())
        self.model = TextClassificationModel(VOCAB, EMSIZE, NUM_CLASS)
        load_params(NAME, self.model)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=5)
        self.forward = compile(self.model)
        self.total_acc, self.total_count = 0, 0

    def step(self) -> float:
        batch = next(self.batches, None)
        if batch is None:   # a new epoch
            self.batches = iter(self.dataloader)
            batch = next(self.batches)
        label, text, offsets = batch
        self.model.train()
        self.optimizer.zero_grad()
        predicted_label = self.forward(text, offsets)
        loss = self.criterion(predicted_label, label)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.1)
        self.optimizer.step()
        self.total_acc += (predicted_label.argmax(1) == label).sum().item()
        self.total_count += label.size(0)
        return loss.item()
