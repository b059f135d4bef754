"""conv2d's output (ops/composite.py) is a value of its own when captured: an in-place
activation after a convolution (``nn.ReLU(inplace=True)``, as PyTorch's examples write)
compiles, with PyTorch's values and gradients; an in-place write to a real view reaches its
base."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj


def _net(nn):
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Conv2d(4, 3, 3, bias=False), nn.LeakyReLU(0.2, inplace=True))


def test_inplace_activation_after_conv_compiles_and_matches_torch():
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)
    m, ref = _net(tj.nn), _net(torch.nn)
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, 2, 8, 8)).astype(np.float32)
    cm = tj.script(m)
    yt = ref(torch.tensor(x))
    (yt * yt).sum().backward()
    grads = dict(ref.named_parameters())
    for _ in range(2):                        # capture, then the cached program
        m.zero_grad()
        y = cm(tj.tensor(x))
        (y * y).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
        for k, p in m.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), grads[k].grad.numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=k)


def test_inplace_on_a_real_view_writes_through_to_its_base():
    def f(x):
        v = x.t()
        v.relu_()
        return v * 2.0

    x0 = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)
    xe, xc = tj.tensor(x0), tj.tensor(x0)
    want = f(xe)
    np.testing.assert_array_equal(tj.script(f)(xc).numpy(), want.numpy())
    np.testing.assert_array_equal(xc.numpy(), np.maximum(x0, 0.0))
