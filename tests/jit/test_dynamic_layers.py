"""A batch size that changes becomes symbolic for every layer models use: a sweep of ten
sizes costs at most three captures, never runs eagerly, and every call (forward, gradients,
BatchNorm's running statistics) equals the eager module's."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as nn
import tracejit.nn.functional as F

SIZES = (2, 3, 5, 8, 13, 4, 7, 16, 9, 11)


class ConvBNPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.reshape(x.size(0), -1))


class Conv1dBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 2, 3, stride=2)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.conv(x), 1).flatten(1)


class Pools(nn.Module):
    """GroupNorm, InstanceNorm, average / max / adaptive pooling, Flatten, LayerNorm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.gn, self.inorm = nn.GroupNorm(2, 4), nn.InstanceNorm2d(4)
        self.avg, self.max, self.adapt = nn.AvgPool2d(2), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d((2, 2))
        self.flat, self.ln, self.fc = nn.Flatten(), nn.LayerNorm(16), nn.Linear(16, 5)

    def forward(self, x):
        x = self.conv(x)
        x = self.avg(self.gn(x)) + self.max(self.inorm(x))
        return self.fc(self.ln(self.flat(self.adapt(x))))


class Recurrent(nn.Module):
    def __init__(self, kind, batch_first, initial):
        super().__init__()
        self.kind, self.batch_first, self.initial = kind, batch_first, initial
        self.rnn = getattr(nn, kind)(4, 6, num_layers=2, batch_first=batch_first)

    def forward(self, x):
        if not self.initial:
            return self.rnn(x)[0]
        b = x.shape[0] if self.batch_first else x.shape[1]
        h = tj.zeros(2, b, 6) + 0.5
        state = (h, tj.zeros(2, b, 6) - 0.25) if self.kind == "LSTM" else h
        out, _ = self.rnn(x, state)
        return out


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, padding):
        return self.attn(x, x, x, key_padding_mask=padding)[0]


class Encoder(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.batch_first = batch_first
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=batch_first)

    def forward(self, x, causal):
        return self.layer(x, src_mask=causal)


class LanguageModel(nn.Module):
    """Embedding -> LSTM -> Linear, the loss inside (reshape with -1, cross entropy)."""

    def __init__(self):
        super().__init__()
        self.emb, self.lstm, self.out = nn.Embedding(11, 6), nn.LSTM(6, 8, batch_first=True), nn.Linear(8, 11)

    def forward(self, x, y):
        h, _ = self.lstm(self.emb(x))
        return F.cross_entropy(self.out(h).reshape(-1, 11), y.reshape(-1))


def _causal():
    return tj.triu(tj.full((5, 5), float("-inf")), 1)


def _padding(b):
    mask = tj.zeros(b, 5, dtype=tj.bool_)
    mask[:, -1] = True
    return mask


CASES = {
    "conv2d-batchnorm-maxpool": (ConvBNPool, lambda b: (tj.randn(b, 3, 8, 8),)),
    "conv1d-batchnorm1d": (Conv1dBN, lambda b: (tj.randn(b, 3, 10),)),
    "convtranspose2d": (ConvTranspose, lambda b: (tj.randn(b, 3, 5, 5),)),
    "norms-and-pools": (Pools, lambda b: (tj.randn(b, 3, 8, 8),)),
    "multihead-attention-padding-mask": (Attention, lambda b: (tj.randn(b, 5, 8), _padding(b))),
    "encoder-layer-causal-mask": (lambda: Encoder(True), lambda b: (tj.randn(b, 5, 8), _causal())),
    "encoder-layer-sequence-first": (lambda: Encoder(False), lambda b: (tj.randn(5, b, 8), _causal())),
}


for _kind in ("LSTM", "GRU", "RNN"):
    for _first in (True, False):
        for _initial in (True, False):
            CASES[f"{_kind.lower()}{'-batch-first' if _first else ''}{'-initial-state' if _initial else ''}"] = (
                lambda k=_kind, f=_first, i=_initial: Recurrent(k, f, i),
                (lambda b: (tj.randn(b, 5, 4),)) if _first else (lambda b: (tj.randn(5, b, 4),)))


def _sweep(make, inputs, compiler, train):
    model = make()
    ref = copy.deepcopy(model)
    model.train(train)
    ref.train(train)
    cm = tj.trace(model, compiler=compiler)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # the recompile limit's warning
        for b in SIZES:
            args = inputs(b)
            with tj.set_grad_enabled(train):
                out, want = cm(*args), ref(*args)
            np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=f"batch {b}")
            if train:
                (out * out).sum().backward()
                (want * want).sum().backward()
                for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5,
                                               err_msg=f"batch {b}: gradient of {name}")
                    p.grad = q.grad = None
            for (name, t), (_, r) in zip(model.named_buffers(), ref.named_buffers()):
                np.testing.assert_allclose(t.numpy(), r.numpy(), rtol=1e-5, atol=1e-6,
                                           err_msg=f"batch {b}: buffer {name}")
    return cm.cache_stats()


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_sweep_is_symbolic(case, train, compiler):
    st = _sweep(*CASES[case], compiler, train)
    assert st["compiles"] <= 3, st["recompile_reasons"]
    assert st["eager_fallbacks"] == 0 and st["hits"] + st["misses"] == len(SIZES)
    assert st["dynamic_dims"], "the batch dim never became symbolic"


def test_a_loss_inside_the_function_keeps_the_batch_symbolic(compiler):
    model = LanguageModel()
    ref = copy.deepcopy(model)
    cm = tj.trace(model, compiler=compiler)
    for b in SIZES:
        x, y = tj.randint(0, 11, (b, 7)), tj.randint(0, 11, (b, 7))
        loss, want = cm(x, y), ref(x, y)
        loss.backward()
        want.backward()
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
            p.grad = q.grad = None
    st = cm.cache_stats()
    assert st["compiles"] <= 3 and st["eager_fallbacks"] == 0
    assert ("x", 0) in st["dynamic_dims"] and ("y", 0) in st["dynamic_dims"]
