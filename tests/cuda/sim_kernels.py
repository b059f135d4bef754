"""Generated CUDA kernels run under numba's CUDA simulator, compared with the CPU results.

Not collected by a plain ``pytest`` run (the name has no ``test_`` prefix): numba picks
the simulator when ``numba.cuda`` is first imported, so these run in a process of
their own, started by ``tests/cuda/test_cuda_simulator.py`` with ``NUMBA_ENABLE_CUDASIM=1``.
To run them by hand::

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda/sim_kernels.py

Each case traces a small function, partitions the graph, runs every fused group
through `codegen_cuda` (host arrays: the simulator accepts them) and every other step
through numpy, and compares with the eager CPU result. The simulator runs a Python
thread per CUDA thread, so sizes stay in the hundreds and grids small (it also
exercises the grid-stride loop: ``run_graph(..., block=32)`` gives 64 threads).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 (run through tests/cuda/test_cuda_simulator.py)",
                allow_module_level=True)

from numba import cuda  # noqa: E402  (the simulator: the env var is set)

import tracejit as tj  # noqa: E402
from tracejit.compiler import codegen_cuda  # noqa: E402
from tracejit.compiler.fusion import Group, partition  # noqa: E402
from kernel_cases import (ELEMENTWISE, SPECIALS, cases, eager, floats, graph_of, ints)  # noqa: E402

assert codegen_cuda.simulator_enabled()
# Simulated threads evaluate numpy scalars: overflow/invalid warnings are expected there.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def check(fn, *arrays, groups=None, block=codegen_cuda.BLOCK, rtol=1e-5, atol=1e-6):
    """Run `fn` through the CUDA kernels and eagerly; compare. Returns the graph's items."""
    g = graph_of(fn, arrays)
    items = partition(g)
    if groups is not None:
        assert sum(isinstance(i, Group) for i in items) == groups, items
    got = codegen_cuda.run_graph(g, *arrays, block=block)
    expect = eager(fn, arrays)
    assert len(got) == len(expect)
    for gv, ev in zip(got, expect):
        gv = np.asarray(gv)
        assert gv.shape == ev.shape, (gv.shape, ev.shape)
        assert gv.dtype == ev.dtype, (gv.dtype, ev.dtype)
        if ev.dtype.kind == "f":
            np.testing.assert_allclose(gv, ev, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(gv, ev)
    return items


# --------------------------------------------------------------------------- every elementwise op

@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_primitive(name):
    for fn, arrays in cases(name):
        check(fn, *arrays, groups=1, rtol=2e-6 if name != "erf" else 1e-5)


def test_every_elementwise_primitive_is_listed():
    assert {"add", "mul", "tanh", "exp", "erf", "where", "cast"} <= set(ELEMENTWISE)


# --------------------------------------------------------------------------- fusion

def gelu(x, y, z):
    a = x * y + z
    return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))


def test_gelu_chain_is_one_kernel():
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(300).astype(np.float32) for _ in range(3))
    items = check(gelu, x, y, z, groups=1)
    assert len(items) == 1 and len(items[0].eqns) == 10
    # A grid smaller than the array: the grid-stride loop covers the rest.
    check(gelu, x, y, z, groups=1, block=32)


def test_gelu_chain_propagates_inf_and_nan():
    x = np.tile(SPECIALS, 4)
    y = np.ones_like(x)
    z = np.roll(x, 3)
    check(gelu, x, y, z, groups=1)


def test_squared_error_loss_is_one_kernel_with_a_reduction():
    rng = np.random.default_rng(1)
    p, y = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    items = check(lambda p, y: ((p - y) ** 2).sum(), p, y, groups=1, block=32)
    assert len(items) == 1 and items[0].reduction is not None
    expect = ((p.astype(np.float64) - y) ** 2).sum()
    got = codegen_cuda.run_graph(graph_of(lambda p, y: ((p - y) ** 2).sum(), [p, y]), p, y, block=32)[0]
    assert abs(float(got) - expect) <= 1e-5 * expect


def test_full_reductions_nan_and_dtypes():
    x = floats(256, seed=4)
    check(lambda x: tj.amax(x * 2.0), x, groups=1, block=32)
    check(lambda x: tj.amin(x - 1.0), x, groups=1, block=32)
    finite = np.where(np.isfinite(x), x, 1.0).astype(np.float32)
    check(lambda x: tj.amax(tj.exp(x)), finite, groups=1, block=32)
    check(lambda x: (x * 0.01 + 1.0).prod(), finite, groups=1, block=32, rtol=1e-4)
    check(lambda x: (x > 0).sum(), x, groups=1, block=32)               # bool -> int64 count
    check(lambda x: (x * 3).sum(), ints(5), groups=1, block=32)        # int32 -> int64
    # one nan anywhere makes max/min nan, whichever block sees it
    for pos in (0, 100, 255):
        y = finite.copy().reshape(-1)
        y[pos] = np.nan
        g = graph_of(lambda x: tj.amax(x * 2.0), [y])
        assert isinstance(partition(g)[0], Group)
        assert np.isnan(codegen_cuda.run_graph(g, y, block=32)[0])
        g = graph_of(lambda x: tj.amin(x * 2.0), [y])
        assert np.isnan(codegen_cuda.run_graph(g, y, block=32)[0])


def test_broadcasting_and_layouts():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    items = check(lambda x, b: x + b, x, b, groups=1)
    spec = codegen_cuda.generate(items[0], ("flat", "nd"))
    assert spec.mode == "nd"
    col = rng.standard_normal((4, 1)).astype(np.float32)
    row = rng.standard_normal((1, 3)).astype(np.float32)
    check(lambda c, r: tj.tanh(c * r) + 1.0, col, row, groups=1)
    s = np.array(2.5, np.float32)  # a 0-d tensor: "scalar" layout
    check(lambda x, s, b: x * s + b, x, s, b, groups=1)
    # a strided (transposed) operand of the iteration shape is read N-d, with its strides
    xt = np.ascontiguousarray(rng.standard_normal((3, 4)).astype(np.float32)).T
    check(lambda x, y: x * 2.0 + y, xt, x, groups=1)
    check(lambda x, b: (x - b) ** 2, rng.standard_normal((2, 3, 5)).astype(np.float32),
          rng.standard_normal((3, 1)).astype(np.float32), groups=1, block=32)


def test_partial_reductions():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    items = check(lambda x, b: (x + b).sum(1, keepdim=True), x, b, groups=1)
    assert items[0].reduction is not None
    check(lambda x: (x * x).sum(0), x, groups=1)
    check(lambda x: tj.exp(x).sum((0, 2)), rng.standard_normal((3, 4, 5)).astype(np.float32), groups=1)
    y = x.copy()
    y[2, 3] = np.nan
    check(lambda x: tj.amax(x * 2.0, 1), y, groups=1)
    check(lambda x: tj.amin(x - 1.0, 0, keepdim=True), y, groups=1)
    # an intermediate also needed outside the group is written while reducing
    check(lambda x: (lambda a: (a, a.sum(1)))(tj.tanh(x) * 2.0), x, groups=1)


def test_empty_tensors():
    e = np.zeros((0,), np.float32)
    check(gelu, e, e, e, groups=1)
    e2 = np.zeros((0, 3), np.float32)
    check(lambda x: tj.exp(x) + 1.0, e2, groups=1)
    check(lambda x: (x * 2.0).sum(), e2, groups=1)              # -> 0.0
    check(lambda x: (x * 2.0).sum(1), e2, groups=1)             # -> shape (0,)
    check(lambda x: (x * 2.0).sum(0), e2, groups=1)             # -> zeros(3)


def test_rank0_group_and_where():
    a, b = np.array(1.5, np.float32), np.array(-2.0, np.float32)
    check(lambda a, b: a * b + 1.0, a, b, groups=1)
    x = floats()
    check(lambda x: tj.where(x > 0, x, 0.1 * x), x, groups=1)
    check(lambda x: tj.relu(x) - tj.sigmoid(x) * tj.clamp(x, -1.0, 1.0), x, groups=1)


def test_float64_groups():
    x = floats().astype(np.float64)
    check(lambda x: tj.tanh(x) * 0.5 + tj.exp(-x * x), x, groups=1, rtol=1e-12, atol=1e-14)
    check(lambda x: (x * x).sum(), np.where(np.isfinite(x), x, 0.0), groups=1, block=32, rtol=1e-12)


# --------------------------------------------------------------------------- launching

def test_kernel_checks_its_arguments():
    x = np.ones((4, 3), np.float32)
    g = graph_of(lambda x: x * 2.0, [x])
    (grp,) = partition(g)
    k = codegen_cuda.load(codegen_cuda.generate(grp, ("flat",)))
    out = np.empty((4, 3), np.float32)
    with pytest.raises(TypeError):
        k(x, out, 4, 3)                               # a flat kernel takes the element count
    with pytest.raises(ValueError, match="C-contiguous"):
        k(np.ones((3, 4), np.float32).T, out, 12)     # a "flat" operand must be C-contiguous
    k(x, out, 12)
    np.testing.assert_array_equal(out, 2 * x)


def test_launch_helper_grid_stride():
    @cuda.jit
    def fill(out, n):
        for i in range(cuda.grid(1), n, cuda.gridsize(1)):
            out[i] = i

    out = np.full(300, -1, np.int64)
    codegen_cuda.launch(fill, 300, out, 300, block=32)   # 2 blocks of 32 threads cover 300
    np.testing.assert_array_equal(out, np.arange(300))
    codegen_cuda.launch(fill, 0, out, 0)                  # nothing launched for no elements


def test_same_structure_other_sizes_reuses_the_kernel():
    a = graph_of(gelu, [np.ones(10, np.float32)] * 3)
    b = graph_of(gelu, [np.ones(999, np.float32)] * 3)
    sa = codegen_cuda.generate(partition(a)[0], ("flat",) * 3)
    sb = codegen_cuda.generate(partition(b)[0], ("flat",) * 3)
    assert codegen_cuda.load(sa).module is codegen_cuda.load(sb).module


# --------------------------------------------------------------------------- rows groups
def _softmax(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def _layer_norm_gelu(x, w, b):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    r = ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt()
    return tj.nn.functional.gelu(d * r * w + b), r


def _cross_entropy_backward(x, onehot, g):
    # d/dx of logsumexp(x) - <x, onehot>, per row, times the rows' upstream gradient
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return (e / e.sum(-1, keepdim=True) - onehot) * g


@pytest.mark.parametrize("cols", [1, 7, 37])
def test_rows_groups_match_cpu(cols):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, cols)).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    items = check(_softmax, x, groups=1, block=32)
    assert items[0].rows
    items = check(_layer_norm_gelu, x, w, b, groups=1, block=32, rtol=1e-5, atol=1e-6)
    assert len(items[0].rows) == 2
    onehot = np.eye(cols, dtype=np.float32)[rng.integers(0, cols, 5)]
    g = rng.standard_normal((5, 1)).astype(np.float32)
    items = check(_cross_entropy_backward, x, onehot, g, groups=1, block=32)
    assert items[0].rows


def test_rows_group_all_masked_row_and_strided_input():
    x = np.random.default_rng(4).standard_normal((9, 4)).astype(np.float32)
    x[:, 2] = -np.inf
    check(lambda t: _softmax(t.t()), x, groups=1, block=32)        # row 2 is nan, as eager
    check(lambda t: _softmax(t), np.random.default_rng(5).standard_normal((2, 3, 70)).astype(np.float64),
          groups=1, block=32, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------- windows groups
def _bn_relu_max_pool(x, a, b):
    return tj.nn.functional.max_pool2d(tj.nn.functional.relu(x * a + b), 3, 2, 1)


def _bn_relu_avg_pool(x, a, b):
    return tj.nn.functional.avg_pool2d(tj.nn.functional.relu(x * a + b), 2, 2)


def _windows(items):
    return [it for it in items if isinstance(it, Group) and it.window is not None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_relu_max_pool_window_group_matches_cpu(dtype):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 7, 9)).astype(dtype)
    x[0, 1, 2, 3] = np.nan
    a, b = (rng.standard_normal((1, 3, 1, 1)).astype(dtype) for _ in range(2))
    items = check(_bn_relu_max_pool, x, a, b, block=32, rtol=0, atol=0)
    (win,) = _windows(items)
    # the ReLU runs after the max (they commute: the trace moves it onto the pooled values)
    assert [e.prim.name for e in win.eqns] == ["mul", "add"]
    assert win.window.prim.name == "max_pool2d_with_offsets"
    (win,) = _windows(check(_bn_relu_avg_pool, x, a, b, block=32, rtol=1e-6, atol=1e-7))
    assert [e.prim.name for e in win.eqns] == ["mul", "add", "relu"]


def _relu_backward_of_scatter(g, rec, x):
    from tracejit.ops.pool_offsets import max_pool2d_scatter
    gx = max_pool2d_scatter(g, rec, tuple(x.shape), (3, 3), (2, 2), (1, 1))
    return tj.where(x > 0, gx, tj.zeros_like(gx)) * 2.0


@pytest.mark.parametrize("kernel, stride, padding", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1))])
def test_pooling_backward_window_groups_match_cpu(monkeypatch, kernel, stride, padding):
    monkeypatch.setenv("TRACEJIT_WINDOWS", "all")
    from tracejit.ops.pool_offsets import max_pool2d_with_offsets
    from tracejit.ops.pooling_prim import avg_pool2d_backward
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    rec = max_pool2d_with_offsets(tj.tensor(x), kernel, stride, padding).numpy()
    g = rng.standard_normal(rec.shape[1:]).astype(np.float32)
    items = check(lambda t: tj.nn.functional.max_pool2d(t, kernel, stride, padding) * 2.0, x, block=32,
                  rtol=0, atol=0)
    assert _windows(items)
    items = check(lambda gt: avg_pool2d_backward(gt, x.shape, kernel, stride, padding) + 1.0, g,
                  block=32, rtol=1e-6, atol=1e-7)
    assert _windows(items)[0].eqns
    if kernel == (3, 3):
        items = check(_relu_backward_of_scatter, g, rec, x, block=32, rtol=0, atol=0)
        (win,) = _windows(items)
        assert win.window.prim.name == "max_pool2d_scatter" and win.eqns


def _bn_forward_relu_max_pool(x, w, b):
    from tracejit.ops.batchnorm_prim import forward_form
    y, mean, var = forward_form(x, w, b, 1.0 / (x.shape[0] * x.shape[2] * x.shape[3]), 1e-5)
    return tj.nn.functional.max_pool2d(tj.relu(y), 3, 2, 1), mean, var


def _bn_backward(g, x, mean, var, w):
    from tracejit.ops.batchnorm_prim import backward_form
    return backward_form(g, x, mean, var, w, 1.0 / (x.shape[0] * x.shape[2] * x.shape[3]), 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_channel_groups_match_cpu(dtype):
    """BatchNorm's channel forms (per-channel sums, then elementwise work; the forward with
    its ReLU and max pooling as the last pass) are one channel group each, a block per
    channel (codegen_cuda_channels.py), with the CPU's values."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 4, 7, 9)) * 3 + 5).astype(dtype)
    w, b = (rng.standard_normal((1, 4, 1, 1)).astype(dtype) for _ in range(2))
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    items = check(_bn_forward_relu_max_pool, x, w, b, block=32, **tol)
    chans = [it for it in items if isinstance(it, Group) and it.rows]
    assert len(chans) == 1 and len(chans[0].rows) == 2 and chans[0].window is not None, items
    spec = codegen_cuda.generate(chans[0], codegen_cuda.layouts_of(chans[0], [x, w, b]))
    assert spec.mode == "channels" and "a block per channel" in spec.source
    g = rng.standard_normal(x.shape).astype(dtype)
    mean, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    items = check(_bn_backward, g, x, mean, var, w, block=32, **tol)
    chans = [it for it in items if isinstance(it, Group) and it.rows]
    assert len(chans) == 1 and len(chans[0].rows) == 2 and chans[0].window is None, items
