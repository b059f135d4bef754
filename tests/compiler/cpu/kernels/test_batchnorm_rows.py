"""BatchNorm's (N, C) record kernels (compiler/cpu/kernels/batchnorm_rows.py) against the
primitives' numpy forms and a float64 reference, what they decline, and BatchNorm1d through
them against PyTorch."""
import numpy as np
import pytest
import torch

import tracejit as tj
from tracejit.compiler.cpu.kernels import batchnorm_rows as K
from tracejit.ops.batchnorm_prim import BATCH_NORM_FORWARD, BN_BACKWARD

pytest.importorskip("numba")


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    c = shape[1]
    return x, g, rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)


@pytest.mark.parametrize("shape", [(2, 1), (7, 4), (70, 33), (5, 3, 1)])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_records_match_the_numpy_forms(shape, dtype, tol):
    x, g, w, b = _inputs(shape, dtype)
    c, size = shape[1], x.size
    rec = K.forward(x, w, b, 1e-5)
    assert rec is not None and rec.shape == (size + 2 * c,) and rec.dtype == dtype
    np.testing.assert_allclose(rec, BATCH_NORM_FORWARD.impl(np, x, w, b, eps=1e-5), rtol=tol, atol=tol)
    stats = rec[size:].reshape(2, c).copy()
    out = K.backward(g, x, stats, w, 1e-5)
    assert out is not None and out.shape == (size + 2 * c,) and out.dtype == dtype
    expected = BN_BACKWARD.impl(np, g, x, stats, w, eps=1e-5)
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * 10)
    # the input gradient is channel-major: row c of the record's head is channel c's run
    gx = out[:size].reshape(c, shape[0])
    np.testing.assert_allclose(gx.T, expected[:size].reshape(c, shape[0]).T, rtol=tol, atol=tol * 10)


def test_sums_are_float64_exact_where_float32_sums_drift():
    """A long column whose mean is far from zero: the kernels' float64 sums give the
    statistics and the gradient sums of the float64 computation, rounded once."""
    x, g, w, b = _inputs((4096, 3), np.float32, seed=1)
    x += 1000.0
    rec = K.forward(x, w, b, 1e-5)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(0), x64.var(0)
    np.testing.assert_allclose(rec[x.size:x.size + 3], mean, rtol=1e-7)
    np.testing.assert_allclose(rec[x.size + 3:], var, rtol=1e-5)
    stats = rec[x.size:].reshape(2, 3).copy()
    out = K.backward(g, x, stats, w, 1e-5)
    s64 = stats.astype(np.float64)
    xhat = (x64 - s64[0]) / np.sqrt(s64[1] + 1e-5)
    np.testing.assert_allclose(out[x.size:x.size + 3], g.astype(np.float64).sum(0), rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(out[x.size + 3:], (g * xhat).sum(0), rtol=1e-5, atol=1e-3)


def test_kernels_decline_what_they_do_not_take():
    x, g, w, b = _inputs((6, 4), np.float32)
    assert K.forward(x.reshape(6, 2, 2), w[:2], b[:2], 1e-5) is None       # runs longer than 1
    assert K.forward(np.asfortranarray(x), w, b, 1e-5) is None             # not C-contiguous
    assert K.forward(x.astype(np.float16), w.astype(np.float16), b.astype(np.float16), 1e-5) is None
    assert K.forward(x, w.astype(np.float64), b, 1e-5) is None              # mixed dtypes
    stats = np.ones((2, 4), np.float32)
    assert K.backward(g[:3], x, stats, w, 1e-5) is None                     # shapes differ
    assert K.backward(g, x, stats[:, :3], w, 1e-5) is None
    assert K.forward(x[:0], w, b, 1e-5) is None                             # empty


def test_strided_gradient_is_read_as_its_values():
    x, g, w, _ = _inputs((9, 5), np.float64)
    stats = np.stack([x.mean(0), x.var(0)])
    strided = np.asfortranarray(g)
    np.testing.assert_array_equal(K.backward(strided, x, stats, w, 1e-5), K.backward(g, x, stats, w, 1e-5))


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm1d_training_steps_match_torch(momentum):
    x, g, _, _ = _inputs((64, 24), np.float32, seed=2)
    mods = [m.nn.BatchNorm1d(24, momentum=momentum) for m in (tj, torch)]
    outs = []
    for m, bn in zip((tj, torch), mods):
        with (tj.no_grad() if m is tj else torch.no_grad()):
            bn.weight.copy_(m.linspace(0.5, 1.5, 24))
            bn.bias.copy_(m.linspace(-1.0, 1.0, 24))
        xs = [m.tensor(x * (k + 1) + k, requires_grad=True) for k in range(3)]
        ys = [bn(t) for t in xs]
        sum((y * m.tensor(g)).sum() for y in ys).backward()
        outs.append([y.detach().numpy() for y in ys] + [t.grad.numpy() for t in xs]
                    + [bn.weight.grad.numpy(), bn.bias.grad.numpy(), bn.running_mean.numpy(),
                       bn.running_var.numpy()])
    for a, e in zip(*outs):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)
