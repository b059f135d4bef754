"""Batch norm's forward as one pass (ops/batchnorm_prim.py ``batch_norm_forward``): the record
(normalized output, then the statistics) equals batch_norm_stats + batch_norm_train, the
output is C-contiguous, eager and compiled training use it, and an in-place ReLU after it
(which writes into the record's head) leaves gradients and running statistics right."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import channel_forms as CF
from tracejit.ops import batchnorm_prim as B
from tracejit.compiler.cpu.kernels import loader as native
from inputs import activation

pytest.importorskip("numba")
SEED = 0


def _inputs(shape, dtype, channel_major, seed=0):
    rng = np.random.default_rng(seed)
    x = activation(rng, shape, dtype, channel_major)
    c = shape[1]
    return x, rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,channel_major", [((8, 3, 5, 6), False), ((8, 3, 5, 6), True),
                                                 ((7, 4), False), ((5, 3, 9), True)])
def test_record_equals_stats_then_train(monkeypatch, dtype, shape, channel_major):
    x, w, b = _inputs(shape, dtype, channel_major)
    c, size = shape[1], x.size
    rec = B.BATCH_NORM_FORWARD.run(np, x, w, b, 1e-5)
    assert rec.shape == (size + 2 * c,) and rec.dtype == dtype
    st = B.BATCH_NORM_STATS.run(np, x)
    y = B.BATCH_NORM_TRAIN.run(np, x, st, w, b, 1e-5)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(rec[size:].reshape(2, c), st, rtol=tol, atol=tol)
    np.testing.assert_allclose(rec[:size].reshape(shape), y, rtol=tol, atol=tol * 10)
    monkeypatch.setattr(CF, "_run", lambda *a: False)     # the numpy form
    np.testing.assert_allclose(B.BATCH_NORM_FORWARD.run(np, x, w, b, 1e-5), rec, rtol=tol, atol=tol * 10)
    # against plain numpy, float64
    x64 = x.astype(np.float64)
    dims = (0,) + tuple(range(2, len(shape)))
    view = (1, -1) + (1,) * (len(shape) - 2)
    want = (x64 - x64.mean(dims, keepdims=True)) / np.sqrt(x64.var(dims, keepdims=True) + 1e-5) \
        * w.astype(np.float64).reshape(view) + b.astype(np.float64).reshape(view)
    np.testing.assert_allclose(rec[:size].reshape(shape), want, rtol=tol * 50, atol=tol * 50)


def test_kernel_ran_output_contiguous_and_stats_returned():
    x, w, b = _inputs((6, 3, 4, 5), np.float32, True)
    y, st = B.batch_norm_forward(tj.tensor(x), tj.tensor(w), tj.tensor(b), 1e-5)
    loaded = {k[1] for k, v in native._kernels.items() if k[0] == "channels" and v.fn is not None}
    assert "forward" in loaded
    assert y.numpy().flags.c_contiguous and tuple(y.shape) == x.shape
    # the statistics (saved for the backward) must not keep the output's memory alive
    base = st.numpy().base
    assert base is None or base.size == 6, "the statistics are a view of the record"
    np.testing.assert_allclose(st.numpy(), np.stack([x.mean((0, 2, 3)), x.var((0, 2, 3))]), rtol=1e-5)


def test_shape_rule_errors():
    x = tj.randn(4, 3, 2)
    with pytest.raises(ValueError, match=r"batch_norm_forward: weight of shape \(2,\) should be \(3,\)"):
        B.batch_norm_forward(x, tj.ones(2), tj.zeros(3), 1e-5)
    with pytest.raises(ValueError, match="batch_norm_forward: expected an input of at least 2 dims"):
        B.batch_norm_forward(tj.randn(5), tj.ones(5), tj.zeros(5), 1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_inplace_relu_after_batchnorm_matches_torch(compiled):
    """ReLU(inplace=True) writes into the record's head: the gradient (which reads x, the
    statistics and the weight, never the output) and the running statistics stay right."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 3, 6, 6)).astype(np.float32)

    def block(nn):
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                             nn.Conv2d(4, 2, 3, bias=False), nn.BatchNorm2d(2), nn.ReLU(inplace=True))

    tm = block(torch.nn)
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for p in tm.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    m = block(tj.nn)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    fwd = tj.script(m) if compiled else m
    for step in range(2):   # a compiled module's second call runs its compiled plan
        for p in m.parameters():
            p.grad = None
        tm.zero_grad()
        y = fwd(tj.tensor(x))
        (y * y * y).sum().backward()
        yt = tm(torch.tensor(x))
        (yt * yt * yt).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    tp = dict(tm.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=2e-3, atol=2e-3,
                                   err_msg=name)
        if name != "0.bias":   # a bias before BatchNorm has no effect: its gradient is ~0
            assert np.abs(tp[name].grad.numpy()).max() > 1e-3, name
    tb = dict(tm.named_buffers())
    for name, buf in m.named_buffers():
        np.testing.assert_allclose(buf.numpy(), tb[name].numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
