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


def test_gradients_user_code_sees_through_batchnorm_can_be_viewed():
    """BatchNorm's input gradient is computed channel-major (the rows a convolution's backward
    reads); a tensor hook, a retained gradient and autograd.grad hand it over C-contiguous, as
    PyTorch does, so the implicit-layer idiom ``grad.view(n, -1)`` works."""
    torch = __import__("pytest").importorskip("torch")
    xa = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    want = {}
    tx = torch.tensor(xa, requires_grad=True)
    ty = tx * 2
    ty.register_hook(lambda g: want.update(hook=g.view(4, -1).clone()))
    torch.nn.BatchNorm2d(3)(ty).square().sum().backward()
    got = {}
    x = tj.tensor(xa, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: got.update(hook=g.view(4, -1).clone()))
    bn = tj.nn.BatchNorm2d(3)
    bn(y).square().sum().backward()
    np.testing.assert_allclose(got["hook"].numpy(), want["hook"].numpy(), rtol=1e-4, atol=1e-5)
    assert y.grad.is_contiguous()
    np.testing.assert_allclose(y.grad.view(4, -1).numpy(), want["hook"].numpy(), rtol=1e-4, atol=1e-5)
    g, = tj.autograd.grad(bn(x).square().sum(), x)
    assert g.is_contiguous() and g.view(4, -1).shape == (4, 75)


def test_a_retained_two_dim_gradient_is_row_major():
    # the gradient of h reaches it transposed (h.t() * w); user code views it flat.
    r = np.random.default_rng(3)
    wa = r.standard_normal((3, 4)).astype(np.float32)
    h = tj.tensor(r.standard_normal((4, 3)).astype(np.float32), requires_grad=True) * 1.0
    h.retain_grad()
    (h.t() * tj.tensor(wa)).sum().backward()
    np.testing.assert_array_equal(h.grad.view(-1).numpy(), wa.T.reshape(-1))
