"""A Linear layer's weight gradient arrives row-major and is taken by the leaf without a
copy (matmul's VJP follows the transposed weight's layout, as PyTorch's mm backward
does), and a gradient anyone else can still see is never taken."""
from __future__ import annotations

import numpy as np

import tracejit as tj
from tracejit.ops.registry import REGISTRY


def _count_copies(monkeypatch):
    calls = []
    prim = REGISTRY["copy"]
    impl = prim.impl
    monkeypatch.setattr(prim, "impl", lambda xp, a, **kw: calls.append(a.shape) or impl(xp, a, **kw))
    return calls


def _data(seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((5, 4)).astype(np.float32), r.standard_normal((3, 4)).astype(np.float32),
            r.standard_normal(3).astype(np.float32))


def test_linear_weight_and_bias_gradients_are_taken_without_copies(monkeypatch):
    xa, wa, ba = _data()
    for x_grad in (False, True):   # the weight saved as a stand-in (first layer) or for real
        x = tj.tensor(xa, requires_grad=x_grad)
        w = tj.tensor(wa, requires_grad=True)
        b = tj.tensor(ba, requires_grad=True)
        calls = _count_copies(monkeypatch)
        tj.nn.functional.linear(x, w, b).sum().backward()
        assert calls == []
        g = w.grad.numpy()
        assert g.flags.c_contiguous
        np.testing.assert_allclose(g, np.ones((5, 3), np.float32).T @ xa, rtol=1e-5)
        np.testing.assert_allclose(b.grad.numpy(), np.full(3, 5.0, np.float32))
        if x_grad:
            np.testing.assert_allclose(x.grad.numpy(), np.ones((5, 3), np.float32) @ wa, rtol=1e-5)


def test_a_kept_gradient_of_the_transposed_weight_is_not_shared_with_the_leaf():
    xa, wa, _ = _data(1)
    x = tj.tensor(xa)
    w = tj.tensor(wa, requires_grad=True)
    wt = w.t()
    kept = []
    wt.register_hook(lambda g: kept.append(g))
    (x @ wt * 2.0).sum().backward()
    want = 2.0 * (np.ones((5, 3), np.float32).T @ xa)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5)
    w.grad.numpy()[...] = 0.0            # the leaf's gradient owns its memory
    np.testing.assert_allclose(kept[0].numpy(), want.T, rtol=1e-5)


def test_row_major_weight_gradient_keeps_the_plain_form():
    # x @ w with w row-major: the usual g's product; nothing transposed.
    r = np.random.default_rng(2)
    xa, wa = r.standard_normal((5, 4)).astype(np.float32), r.standard_normal((4, 3)).astype(np.float32)
    w = tj.tensor(wa, requires_grad=True)
    (tj.tensor(xa) @ w).sum().backward()
    assert w.grad.numpy().flags.c_contiguous
    np.testing.assert_allclose(w.grad.numpy(), xa.T @ np.ones((5, 3), np.float32), rtol=1e-5)
