"""BatchNorm's channel-form kernels (compiler/cpu/kernels/channel_forms.py) on operands of
other ranks than (N, C, H, W): (N, C, L) and (N, C, D, H, W), contiguous and strided, read
as (N, C, 1, L) runs; the numpy forms' values and PyTorch's."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import channel_forms
from tracejit.ops.batchnorm_prim import BATCH_NORM_FORWARD, BN_BACKWARD

torch = pytest.importorskip("torch")

R = np.random.default_rng(0)


def _inputs(shape, strided):
    if strided:   # (N, C, D, H, W) laid out as (N, D, C, H, W): a conv3d's output by planes
        x = (R.standard_normal((shape[0], shape[2], shape[1]) + shape[3:]) * 2 + 0.5).astype(np.float32)
        return x.swapaxes(1, 2)
    return (R.standard_normal(shape) * 2 + 0.5).astype(np.float32)


@pytest.mark.parametrize("shape, strided", [((4, 6, 37), False), ((2, 5, 3, 4, 7), False),
                                            ((2, 5, 3, 4, 7), True)])
def test_forward_and_backward_match_the_numpy_forms(shape, strided):
    x = _inputs(shape, strided)
    c = shape[1]
    w, b = R.standard_normal(c).astype(np.float32), R.standard_normal(c).astype(np.float32)
    got = channel_forms.forward(x, w, b, 1e-5)
    assert got is not None   # (the suite compiles in sync: the kernel ran)
    want = BATCH_NORM_FORWARD.impl(np, x, w, b, 1e-5)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    g = R.standard_normal(shape).astype(np.float32)
    stats = np.stack([want[x.size:x.size + c], want[x.size + c:]])
    got = channel_forms.backward(g, x, stats, w, 1e-5)
    assert got is not None
    np.testing.assert_allclose(got, BN_BACKWARD.impl(np, g, x, stats, w, 1e-5), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("shape, layer", [((4, 6, 37), "BatchNorm1d"), ((2, 5, 3, 4, 7), "BatchNorm3d")])
def test_layers_match_torch(shape, layer):
    x = _inputs(shape, len(shape) == 5)
    w = R.standard_normal(shape).astype(np.float32)
    out = []
    for L in (tj, torch):
        m = getattr(L.nn, layer)(shape[1])
        xt = L.tensor(x).requires_grad_(True)
        y = m(xt)
        (y * L.tensor(w)).sum().backward()
        out.append((y.detach().numpy(), xt.grad.numpy(), m.weight.grad.numpy(), m.running_var.numpy()))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
