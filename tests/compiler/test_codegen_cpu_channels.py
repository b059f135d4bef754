"""Channel groups (fusion._row_reduction's per-channel sums, codegen_cpu_channels.py): BatchNorm
written as primitives (per-channel sums, then elementwise work reading them) is one kernel,
with a max or average pooling after it as the kernel's last pass, so the normalized value is
never written; forward and gradients equal PyTorch's in float32 and float64, for odd sizes,
padding, stride and ceil_mode, with and without a pooling."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-12)}
# (kernel, stride, padding, ceil_mode)
POOLS = [(2, 2, 0, False), (3, 2, 1, True), (3, 1, 1, False), (2, 3, 1, True)]


def _bn(T, x, w, b, eps=1e-5):
    """Training-mode BatchNorm as per-channel sums and elementwise ops (in `T`)."""
    inv = 1.0 / (x.shape[0] * x.shape[2] * x.shape[3])
    mean = x.sum((0, 2, 3), keepdim=True) * inv
    xc = x - mean
    var = (xc * xc).sum((0, 2, 3), keepdim=True) * inv
    return xc * (w.reshape(1, -1, 1, 1) * (var + eps).rsqrt()) + b.reshape(1, -1, 1, 1)


def _fn(T, pool):
    P = F if T is tj else torch.nn.functional

    def f(x, w, b):
        y = T.relu(_bn(T, x, w, b))
        if pool is None:
            return y
        k, s, p, ceil = pool
        return P.max_pool2d(y, k, s, p, ceil_mode=ceil)
    return f


def _arrays(dtype, shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)   # offset: the two-pass variance
    w = rng.standard_normal(shape[1]).astype(dtype)
    b = rng.standard_normal(shape[1]).astype(dtype)
    return x, w, b


def _run(fn, arrays, g, lib):
    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    (y * lib.tensor(g)).sum().backward()
    return [y.detach().numpy()] + [t.grad.numpy() for t in ts]


def _infer_groups(cf):
    plan = cf._entries[-1].executor.infer_plan()
    return [it for it in plan.items if isinstance(it, Group)], plan


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", POOLS + [None])
def test_batch_norm_relu_pool_as_one_channel_group_matches_torch(dtype, pool):
    arrays = _arrays(dtype, (3, 4, 9, 11))
    cf = tj.compile(_fn(tj, pool))
    y = None
    for _ in range(2):
        y = cf(*(tj.tensor(a) for a in arrays)).numpy()
    ref = _fn(torch, pool)(*(torch.tensor(a) for a in arrays)).numpy()
    np.testing.assert_allclose(y, ref, **TOL[dtype])
    groups, plan = _infer_groups(cf)
    chan = [g for g in groups if g.rows]
    assert len(chan) == 1 and len(chan[0].rows) == 2, plan.describe()
    assert (chan[0].window is not None) == (pool is not None), plan.describe()
    src = "".join(plan.kernel_sources())
    assert "for i1 in" in src and "channels" in src
    # the normalized (N, C, H, W) value is not written where a pooling takes it
    if pool is not None:
        assert all(tuple(v.aval.shape) != arrays[0].shape for v in chan[0].outputs), plan.describe()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_through_the_channel_group_match_torch(dtype):
    arrays = _arrays(dtype, (4, 3, 7, 8))
    pool = POOLS[1]
    rng = np.random.default_rng(1)
    out_shape = _fn(torch, pool)(*(torch.tensor(a) for a in arrays)).shape
    g = rng.standard_normal(tuple(out_shape)).astype(dtype)
    ref = _run(_fn(torch, pool), arrays, g, torch)
    cf = tj.compile(_fn(tj, pool))
    got = None
    for _ in range(2):
        got = _run(cf, arrays, g, tj)
    for a, r in zip(got, ref):
        np.testing.assert_allclose(a, r, **TOL[dtype])


def test_the_channel_kernel_runs_in_parallel_over_channels():
    arrays = _arrays(np.float32, (8, 16, 40, 40))
    cf = tj.compile(_fn(tj, POOLS[0]))
    for _ in range(2):
        y = cf(*(tj.tensor(a) for a in arrays)).numpy()
    ref = _fn(torch, POOLS[0])(*(torch.tensor(a) for a in arrays)).numpy()
    np.testing.assert_allclose(y, ref, **TOL[np.float32])
    _, plan = _infer_groups(cf)
    assert "for i1 in" in "".join(plan.kernel_sources())


def test_last_dim_rows_and_channel_sums_stay_apart():
    """A LayerNorm-like sum over the last dim and a channel sum of one value are two groups:
    a group folds rows of one kind."""
    def f(x):
        a = x.sum(3, keepdim=True)
        c = x.sum((0, 2, 3), keepdim=True)
        return (x - a) * (x - c) + (x * x).sum(3, keepdim=True) + (x * x).sum((0, 2, 3), keepdim=True)
    x = _arrays(np.float64, (2, 3, 5, 6))[0]
    cf = tj.compile(f)
    for _ in range(2):
        y = cf(tj.tensor(x)).numpy()
    xt = torch.tensor(x)
    np.testing.assert_allclose(y, f(xt).numpy(), **TOL[np.float64])
    groups, plan = _infer_groups(cf)
    assert any(g.rows for g in groups), plan.describe()
    for g in groups:
        assert len({tuple(r.params["dims"]) for r in g.rows}) <= 1


def test_a_convolution_output_reaches_the_channel_group_as_it_is():
    """A convolution's output (C-contiguous (N, C, H, W), ops/conv_gemm.py) reaches the
    channel group with no permuting step and no channel-major view."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 9, 10)).astype(np.float32)
    k = (rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float32)
    w, b = _arrays(np.float32, (1, 4, 1, 1))[1:]

    def f(T, P):
        def g(x, k, w, b):
            return P.max_pool2d(T.relu(_bn(T, P.conv2d(x, k), w, b)), 2)
        return g
    cf = tj.compile(f(tj, F))
    for _ in range(2):
        y = cf(*(tj.tensor(a) for a in (x, k, w, b))).numpy()
    ref = f(torch, torch.nn.functional)(*(torch.tensor(a) for a in (x, k, w, b))).numpy()
    np.testing.assert_allclose(y, ref, **TOL[np.float32])
    _, plan = _infer_groups(cf)
    assert "step: permute" not in plan.describe() and "_cm(" not in plan.source, plan.source


_RENDER_BN_BACKWARD = """
import hashlib
from tracejit.compiler import backends
from tracejit.compiler.cpu.kernels import channel_forms
from tracejit.ops.batchnorm_prim import backward_form
shapes = [((4, 3, 5, 2), "float32")] * 2 + [((1, 3, 1, 1), "float32")] * 3 + [((1,), "float32")]
layouts = ("flat", "flat", "ndc", "ndc", "ndc", "scalar")
_, _, nest, _ = channel_forms._lower(backward_form, shapes, layouts, 0, 1e-5)
print(hashlib.sha256(backends.get("cpu").render(nest, False).source.encode()).hexdigest())
"""


def test_a_channel_kernel_source_is_the_same_in_every_process():
    """The disk cache keys kernels by their source: BatchNorm backward's channel kernel
    (helpers returning per-channel values) must render alike whatever the hash seed."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(tj.__file__).resolve().parents[1])
    digests = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=root)
        out = subprocess.run([sys.executable, "-c", _RENDER_BN_BACKWARD], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        digests.add(out[-1])
    assert len(digests) == 1
