"""Whole small models, forward and backward, against PyTorch (skipped without it)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _run(m, F, params, x, y):
    w1, b1, g, beta, w2, b2, cw, cb, emb = params
    h = F.conv2d(x, cw, cb, padding=1)
    h = F.max_pool2d(m.relu(h), 2)
    h = h.reshape(h.shape[0], -1)
    h = F.linear(h, w1, b1)
    h = F.layer_norm(h, (h.shape[-1],), g, beta)
    h = F.gelu(h, approximate="tanh") + emb[y]
    logits = F.linear(F.dropout(h, p=0.0), w2, b2)
    return F.cross_entropy(logits, y, label_smoothing=0.05) + (logits.softmax(-1) ** 2).mean()


def test_small_convnet_matches_torch():
    rng = np.random.default_rng(0)
    shapes = [(16, 32), (16,), (16,), (16,), (5, 16), (5,), (2, 3, 3, 3), (2,), (5, 16)]
    params = [rng.standard_normal(s) * 0.3 for s in shapes]
    x = rng.standard_normal((4, 3, 8, 8))
    y = rng.integers(0, 5, 4)

    ours = [tj.tensor(p, requires_grad=True) for p in params]
    loss = _run(tj, tj, ours, tj.tensor(x), tj.tensor(y))
    loss.backward()

    theirs = [torch.tensor(p, requires_grad=True) for p in params]
    tloss = _run(torch, torch.nn.functional, theirs, torch.tensor(x), torch.tensor(y))
    tloss.backward()

    assert loss.item() == pytest.approx(tloss.item(), rel=1e-10)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-11)


def test_rnn_like_loop_with_setitem_matches_torch():
    rng = np.random.default_rng(1)
    wx, wh = rng.standard_normal((3, 4)), rng.standard_normal((4, 4)) * 0.5
    xs = rng.standard_normal((5, 2, 3))

    def run(m, wx, wh, xs):
        h = m.zeros(2, 4, dtype=wx.dtype)
        outs = m.zeros(5, 2, 4, dtype=wx.dtype)
        for t in range(5):
            h = m.tanh(xs[t] @ wx + h @ wh)
            outs[t] = h
        return (outs.sum(0) * m.arange(4, dtype=wx.dtype)).sum() + outs[:, :, 1].pow(2).mean()

    a = [tj.tensor(v, requires_grad=True) for v in (wx, wh)]
    b = [torch.tensor(v, requires_grad=True) for v in (wx, wh)]
    la, lb = run(tj, *a, tj.tensor(xs)), run(torch, *b, torch.tensor(xs))
    la.backward()
    lb.backward()
    assert la.item() == pytest.approx(lb.item(), rel=1e-12)
    for o, t in zip(a, b):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-10)
