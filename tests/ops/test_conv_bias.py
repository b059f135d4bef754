"""conv2d's bias (ops/composite.py conv2d): its values and gradients equal PyTorch's and
the bias-free convolution plus a broadcast bias; a bias of another dtype promotes.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F


def test_conv_with_bias_matches_bias_free_conv_plus_bias_and_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((4, 3, 10, 9))
    w0, b0 = rng.standard_normal((5, 3, 3, 3)), rng.standard_normal(5)
    g0 = rng.standard_normal((4, 5, 8, 5))

    def grads(f, mod):
        x, w, b = (mod.tensor(a, requires_grad=True) for a in (x0, w0, b0))
        out = f(x, w, b)
        (out * mod.tensor(g0)).sum().backward()
        return [t.detach().numpy() for t in (out, x.grad, w.grad, b.grad)]

    fused = grads(lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(0, 1)), tj)
    split = grads(lambda x, w, b: F.conv2d(x, w, None, stride=(1, 2), padding=(0, 1))
                  + b.reshape(1, 5, 1, 1), tj)
    ref = grads(lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=(1, 2), padding=(0, 1)),
                torch)
    for a, s, r in zip(fused, split, ref):
        np.testing.assert_allclose(a, s, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fused[3], g0.sum(axis=(0, 2, 3)), rtol=1e-12)


def test_mixed_dtype_bias_promotes():
    x = tj.tensor(np.ones((1, 1, 3, 3), np.float32))
    w = tj.tensor(np.ones((1, 1, 2, 2), np.float32))
    out = F.conv2d(x, w, tj.tensor(np.array([0.5])))   # float64 bias: not the weight's dtype
    np.testing.assert_allclose(out.numpy(), np.full((1, 1, 2, 2), 4.5))


@pytest.mark.parametrize("frozen", ["w", "b", "x"])
def test_gradients_with_one_operand_frozen_match_torch(frozen):
    """The bias's gradient with the weight's (one record) or alone (a frozen weight)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    arrays = dict(x=rng.standard_normal((3, 2, 7, 6)), w=rng.standard_normal((4, 2, 3, 3)),
                  b=rng.standard_normal(4))
    g0 = rng.standard_normal((3, 4, 4, 2))

    def grads(mod):
        t = {k: mod.tensor(a, requires_grad=k[0] != frozen[0]) for k, a in arrays.items()}
        out = mod.nn.functional.conv2d(t["x"], t["w"], t["b"], stride=(2, 2), padding=(1, 0))
        (out * mod.tensor(g0)).sum().backward()
        return [out.detach().numpy()] + [t[k].grad.numpy() for k in "xwb" if k != frozen[0]]
    got, ref = grads(tj), grads(torch)
    assert len(got) == len(ref) == 3
    for a, r in zip(got, ref):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
