"""BatchNorm's gradient of a max pooling's scattered gradient as one record (ops/bn_pool.py
``batch_norm_backward_pooled``) and its rewrite in a compiled training backward
(jit/bn_pool_fusion.py): the record is bitwise max_pool2d_scatter then batch_norm_backward;
a compiled conv -> BatchNorm -> ReLU -> max-pool step takes it and gives bitwise the step
without it (outputs, gradients, running statistics), matching eager and PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.kernels import bn_pool_kernels as BPK
from tracejit.ops import batchnorm_prim as B
from tracejit.ops import bn_pool
from tracejit.ops import pool_offsets as P
from inputs import activation, training_variant

pytest.importorskip("numba")

def _pooled(x, w, b, geo):
    """(max_pool2d_with_offsets' record of batch_norm_forward's output, its statistics)."""
    r = B.BATCH_NORM_FORWARD.run(np, x, w, b, 1e-5)
    rec = P.MAX_POOL2D_WITH_OFFSETS.run(np, r[:x.size].reshape(x.shape), *geo)
    return np.ascontiguousarray(rec), r[x.size:].reshape(2, x.shape[1])


TILES = [((2, 2), (2, 2), (0, 0), (1, 1)), ((3, 3), (3, 3), (0, 0), (1, 1)), ((2, 3), (2, 3), (0, 0), (1, 1))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channel_major", [False, True])
@pytest.mark.parametrize("geo", TILES)
def test_backward_is_bitwise_scatter_then_batch_norm_backward(dtype, channel_major, geo):
    rng = np.random.default_rng(5)
    x = activation(rng, (6, 3, 10, 11), dtype, channel_major)   # rows/columns past the windows
    x[0, 1, :2, :2] = x[0, 1, 0, 0]
    w, b = rng.standard_normal(3).astype(dtype), rng.standard_normal(3).astype(dtype)
    rec, stats = _pooled(x, w, b, geo)
    gp = rng.standard_normal(rec.shape[1:]).astype(dtype)
    gp[0, 0, 0, 0] = -0.0
    assert BPK._get_backward(np.dtype(dtype).name, geo[0]) is not None   # the kernel runs
    got = bn_pool.BN_BACKWARD_POOLED.run(np, gp, rec, x, stats, w, 1e-5, *geo)
    g = P.MAX_POOL2D_SCATTER.run(np, gp, rec, x.shape, *geo)
    want = B.BN_BACKWARD.run(np, g, x, stats, w, 1e-5)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint8), want.view(np.uint8))
    # the sums against float64 numpy: sum g, sum g * xhat per channel
    g64, x64 = g.astype(np.float64), x.astype(np.float64)
    xhat = (x64 - stats[0].astype(np.float64).reshape(1, 3, 1, 1)) / np.sqrt(
        stats[1].astype(np.float64).reshape(1, 3, 1, 1) + 1e-5)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got[-6:-3], g64.sum((0, 2, 3)), rtol=tol, atol=tol)
    np.testing.assert_allclose(got[-3:], (g64 * xhat).sum((0, 2, 3)), rtol=tol, atol=tol)


def test_numpy_form_is_the_composition():
    rng = np.random.default_rng(2)
    x = activation(rng, (3, 2, 4, 4), np.float32)
    w, b = np.ones(2, np.float32), np.zeros(2, np.float32)
    geo = TILES[0]
    rec, stats = _pooled(x, w, b, geo)
    gp = rng.standard_normal(rec.shape[1:]).astype(np.float32)
    got = bn_pool.batch_norm_backward_pooled(tj.tensor(gp), tj.tensor(rec), tj.tensor(x), tj.tensor(stats),
                                             tj.tensor(w), 1e-5, *geo[:2])
    want = B.BN_BACKWARD.run(np, P.MAX_POOL2D_SCATTER.run(np, gp, rec, x.shape, *geo), x, stats, w, 1e-5)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)


def _net(T, state=None):
    """conv -> BatchNorm -> ReLU -> 2x2 max-pool, twice, then a linear layer (LeNet's shape,
    smaller), in tracejit or torch; parameters and buffers from `state` when given."""
    class Net(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = T.nn.Conv2d(1, 6, 3), T.nn.BatchNorm2d(6)
            self.c2, self.b2 = T.nn.Conv2d(6, 8, 3), T.nn.BatchNorm2d(8)
            self.fc = T.nn.Linear(8 * 2 * 2, 5)

        def forward(self, x):
            x = T.nn.functional.max_pool2d(T.relu(self.b1(self.c1(x))), 2)
            x = T.nn.functional.max_pool2d(T.relu(self.b2(self.c2(x))), 2)
            return self.fc(x.reshape(x.shape[0], -1))

    T.manual_seed(0)
    net = Net()
    if state is not None:
        with T.no_grad():
            for k, p in net.state_dict().items():
                p.copy_(T.tensor(state[k]))
    return net


def _run(monkeypatch, fused: bool, x, y, state):
    monkeypatch.setenv("TRACEJIT_BN_POOL", "1" if fused else "0")
    net = _net(tj, state)
    net.train()
    cf = tj.script(net)
    out = None
    for _ in range(2):
        out = cf(tj.tensor(x))
        F.cross_entropy(out, tj.tensor(y)).backward()
    fwd, bwd = training_variant(cf.forward)[:2]
    names = [e.prim.name for e in fwd.graph.eqns] + [e.prim.name for e in bwd.graph.eqns]
    res = [out.detach().numpy()] + [p.grad.numpy() for p in net.parameters()] + \
          [b.numpy() for b in net.buffers()]
    return names, [r.copy() for r in res]


def test_compiled_step_fuses_and_matches_unfused_eager_and_torch(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 1, 14, 14)).astype(np.float32)
    y = rng.integers(0, 5, 8)
    state = {k: v.numpy().copy() for k, v in _net(tj).state_dict().items()}
    names, fused = _run(monkeypatch, True, x, y, state)
    assert "batch_norm_values" not in names and "batch_norm_forward" not in names
    assert names.count("batch_norm_backward_pooled") == 2 and "max_pool2d_scatter" not in names
    names0, plain = _run(monkeypatch, False, x, y, state)
    assert names0.count("batch_norm_backward_pooled") == 0 and names0.count("max_pool2d_scatter") == 2
    assert len(fused) == len(plain)
    for a, b in zip(fused, plain):
        assert np.array_equal(a, b)
    # eager tracejit (same order of sums: float32 rounding at most)
    net = _net(tj, state)
    net.train()
    for _ in range(2):
        out = net(tj.tensor(x))
        F.cross_entropy(out, tj.tensor(y)).backward()
    eager = [out.detach().numpy()] + [p.grad.numpy() for p in net.parameters()] + \
            [b.numpy() for b in net.buffers()]
    for a, b in zip(fused, eager):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    torch = pytest.importorskip("torch")
    tnet = _net(torch, state)
    tnet.train()
    for _ in range(2):
        out = tnet(torch.tensor(x))
        torch.nn.functional.cross_entropy(out, torch.tensor(y)).backward()
    ref = [out.detach().numpy()] + [p.grad.numpy() for p in tnet.parameters()] + \
          [b.numpy() for b in tnet.buffers()]
    for a, b in zip(fused, ref):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_same_bits_however_the_channels_are_split():
    from inputs import same_bits_under_uneven_split
    geo = TILES[0]
    rng = np.random.default_rng(6)
    x = activation(rng, (4, 5, 8, 9), np.float32, True)
    w, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    gp = rng.standard_normal((4, 5, 4, 4)).astype(np.float32)
    rec, stats = _pooled(x, w, b, geo)

    def run():
        return (bn_pool.BN_BACKWARD_POOLED.run(np, gp, rec, x, stats, w, 1e-5, *geo),)
    same_bits_under_uneven_split(run, lambda n: [(0, 1), (1, 3), (3, 3), (3, n)], calls=1)
