"""A character-level MLP language model in the style of makemore (part 2).

Raw parameter tensors (an embedding table ``C``, a tanh hidden layer, a logits layer),
a context of 3 characters over a 27-letter vocabulary, minibatches of 32 picked by index
from the whole training set, ``F.cross_entropy``, and SGD written by hand
(``p.data += -lr * p.grad``). Every op is on a few thousand elements: the step measures
what a framework costs per op. Compiled: the forward-and-loss function.
"""
import torch
import torch.nn.functional as F

from .common import rng, tensor_params

NAME = "charmlp"
VOCAB, BLOCK, EMB, HIDDEN, BATCH = 27, 3, 10, 200, 32
WORDS, BATCHES = 20000, 16


def forward(X, Y, C, W1, b1, W2, b2):
    emb = C[X]                                   # (batch, block, emb)
    h = torch.tanh(emb.view(-1, BLOCK * EMB) @ W1 + b1)
    logits = h @ W2 + b2
    return F.cross_entropy(logits, Y)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.Xtr = torch.from_numpy(r.integers(0, VOCAB, (WORDS, BLOCK)))
        self.Ytr = torch.from_numpy(r.integers(0, VOCAB, WORDS))
        self.batches = [torch.from_numpy(r.integers(0, WORDS, BATCH)) for _ in range(BATCHES)]
        p = tensor_params(NAME, C=(VOCAB, EMB), W1=(BLOCK * EMB, HIDDEN), b1=(HIDDEN,),
                          W2=(HIDDEN, VOCAB), b2=(VOCAB,))
        self.parameters = [p["C"], p["W1"], p["b1"], p["W2"], p["b2"]]
        self.forward = compile(forward)
        self.i = 0

    def step(self) -> float:
        ix = self.batches[self.i % BATCHES]
        self.i += 1
        loss = self.forward(self.Xtr[ix], self.Ytr[ix], *self.parameters)
        for p in self.parameters:
            p.grad = None
        loss.backward()
        lr = 0.1
        for p in self.parameters:
            p.data += -lr * p.grad
        return loss.item()
