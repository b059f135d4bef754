"""Word-level language model, as pytorch/examples' word_language_model writes it.

``RNNModel``: Embedding, a 2-layer ``nn.LSTM`` (time-major) and a Linear decoder whose
weight is the encoder's (``tie_weights``), ``log_softmax`` and NLLLoss; the corpus
``batchify``-ed into 20 columns, ``get_batch`` slices of bptt 35, the hidden state
carried from batch to batch by ``repackage_hidden`` (``detach``), ``clip_grad_norm_(0.25)``
and the example's SGD by hand (``p.data.add_(p.grad, alpha=-lr)``), the learning rate
divided by 4 every 8 steps. Vocabulary 2000, width 128. Compiled: the model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "wordlm"
NTOKENS, EMSIZE, NHID, NLAYERS, BATCH, BPTT = 2000, 128, 128, 2, 20, 35


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        corpus = torch.from_numpy(r.integers(0, NTOKENS, BATCH * (4 * BPTT + 1)))
        self.train_data = batchify(corpus, BATCH)
        self.model = RNNModel(NTOKENS, EMSIZE, NHID, NLAYERS)
        load_params(NAME, self.model)
        self.criterion = nn.NLLLoss()
        self.forward = compile(self.model)
        self.hidden = self.model.init_hidden(BATCH)
        self.lr, self.i = 20.0, 0

    def step(self) -> float:
        batch = self.i % 4
        if batch == 0:
            self.hidden = self.model.init_hidden(BATCH)
        if self.i and self.i % 8 == 0:
            self.lr /= 4.0
        self.i += 1
        data, targets = get_batch(self.train_data, batch * BPTT)
        self.model.zero_grad()
        self.hidden = repackage_hidden(self.hidden)
        output, self.hidden = self.forward(data, self.hidden)
        loss = self.criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        for p in self.model.parameters():
            p.data.add_(p.grad, alpha=-self.lr)
        return loss.item()
