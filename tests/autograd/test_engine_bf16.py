"""The engine's gradients between eager bf16 ops: rounded in float32 where they only widen back."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16
from tracejit.autograd import engine


def _cnn_grads(retain=False):
    """Gradients of a small conv -> BatchNorm -> ReLU -> pool -> linear step under autocast."""
    rng = np.random.default_rng(0)
    tj.manual_seed(0)
    conv, bn, fc = tj.nn.Conv2d(3, 8, 3), tj.nn.BatchNorm2d(8), tj.nn.Linear(8 * 7 * 7, 5)
    x = tj.tensor(rng.standard_normal((4, 3, 16, 16)).astype(np.float32), requires_grad=True)
    y = tj.tensor(rng.integers(0, 5, 4))
    with tj.autocast("cpu"):
        h = tj.relu(bn(conv(x)))
        if retain:
            h.retain_grad()
        p = tj.nn.functional.max_pool2d(h, 2)
        loss = tj.nn.functional.cross_entropy(fc(p.reshape(4, -1)), y)
    loss.backward()
    grads = [x.grad] + [q.grad for m in (conv, bn, fc) for q in m.parameters()]
    return [g.detach().float().numpy() for g in grads], h


def test_fused_rounding_gives_the_bits_of_rounding_then_widening(monkeypatch):
    calls = []
    real = bf16.round_values
    monkeypatch.setattr(bf16, "round_values", lambda a: calls.append(a.shape) or real(a))
    fused, _ = _cnn_grads()
    assert (4, 8, 14, 14) in calls        # the activations' gradients took the one pass
    monkeypatch.setattr(engine, "_widens_back", lambda node, targets: False)
    calls.clear()
    plain, _ = _cnn_grads()
    assert (4, 8, 14, 14) not in calls    # (autocast's own round_bf16 rounds the products' operands)
    assert len(fused) == len(plain)
    for a, b in zip(fused, plain):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_a_retained_bf16_gradient_stays_bf16():
    grads, h = _cnn_grads(retain=True)
    assert h.dtype is tj.bfloat16 and h.grad.dtype is tj.bfloat16
    assert h.grad.shape == h.shape and np.isfinite(h.grad.float().numpy()).all()


def test_cnn_gradients_track_torch_autocast():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 5, 4)

    def build(T):
        T.manual_seed(0)
        return T.nn.Conv2d(3, 8, 3), T.nn.BatchNorm2d(8), T.nn.Linear(8 * 7 * 7, 5)

    mods_t, mods_j = build(torch), build(tj)
    for mt, mj in zip(mods_t, mods_j):
        mj.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    out = []
    for T, (conv, bn, fc) in ((torch, mods_t), (tj, mods_j)):
        xt = T.tensor(x, requires_grad=True)
        with T.autocast("cpu", dtype=T.bfloat16):
            p = T.nn.functional.max_pool2d(T.relu(bn(conv(xt))), 2)
            loss = T.nn.functional.cross_entropy(fc(p.reshape(4, -1)), T.tensor(y))
        loss.backward()
        out.append([xt.grad.float().numpy(), conv.weight.grad.float().numpy(), fc.weight.grad.float().numpy()])
    for gt, gj in zip(*out):
        # bf16 roundings in different summation orders: within a few bf16 steps of the scale
        np.testing.assert_allclose(gj, gt, rtol=0.05, atol=0.02 * np.abs(gt).max())


@pytest.mark.parametrize("n", [3, 5000])
def test_bf16_gradients_accumulate_as_values_not_words(n):
    """Two gradients of one bf16 tensor (the engine's buffer) and a second backward into a
    bf16 leaf's .grad add as values: 1.5 + 1.5 is 3, not the words' integer sum (inf)."""
    c = tj.tensor(np.arange(n) % 2 == 0)
    i = tj.tensor(np.arange(n) + 5)
    a = tj.tensor(np.full(n, 1.5, np.float32), dtype=tj.bfloat16).requires_grad_()
    (tj.where(c, i, a) * a).float().sum().backward()
    def r(v):
        return bf16.round_values(np.asarray(v, np.float32))
    want = r(np.where(c.numpy(), r(np.arange(n) + 5), 3.0))   # (257 is 256 in bf16)
    np.testing.assert_array_equal(a.grad.float().numpy(), want)
    (a * 2).float().sum().backward()
    np.testing.assert_array_equal(a.grad.float().numpy(), r(want + 2))


def test_a_bf16_scalar_loss_seeds_its_backward_with_one():
    w = tj.randn(3, requires_grad=True)
    for _ in range(2):       # the root gradient made, then the kept one reused
        w.grad = None
        loss = (w.bfloat16() * 2).sum()
        assert loss.dtype is tj.bfloat16
        loss.backward()
        np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])
    (g,) = tj.autograd.grad(w.bfloat16().sum(), [w])
    np.testing.assert_array_equal(g.numpy(), [1.0, 1.0, 1.0])
