"""Windows groups (windows.py, loopnest.Window, codegen_cpu_windows.py): max and average
pooling, forward and backward, as generated window kernels, alone and fused with the
BatchNorm-normalize/ReLU work in front (and the elementwise gradient work behind), equal
to PyTorch and to the eager path, in float32 and float64, for kernel/stride/padding
variants, odd sizes and non-contiguous inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group, partition
from tracejit.compiler.kernel_errors import group_label
from differential import assert_compiled_matches, assert_valid_partition

from tests.cuda.kernel_cases import graph_of

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

# (kernel, stride, padding): side by side, overlapping with padding, stride 1, rectangular,
# apart with padding, side by side with padding
GEOMETRIES = [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 3), (1, 1), (1, 1)),
              ((2, 3), (1, 2), (1, 1)), ((2, 2), (1, 1), (0, 0)), ((2, 2), (3, 3), (1, 1)),
              ((3, 2), (3, 2), (1, 0))]
# the geometries whose windows tile the input (the CPU gather walks them per window)
TILING = [GEOMETRIES[0], GEOMETRIES[6]]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.fixture
def all_windows(monkeypatch):
    """Every pooling a windows group (not only where elementwise work fuses)."""
    monkeypatch.setenv("TRACEJIT_WINDOWS", "all")


def _pool(kind):
    return F.max_pool2d if kind == "max" else F.avg_pool2d


def _torch_pool(kind):
    return torch.nn.functional.max_pool2d if kind == "max" else torch.nn.functional.avg_pool2d


def _input(dtype, shape, strided: bool):
    rng = np.random.default_rng(0)
    if strided:   # a transposed view: H and W swapped in memory
        base = rng.standard_normal(shape[:2] + (shape[3], shape[2])).astype(dtype)
        return base.transpose(0, 1, 3, 2)
    return rng.standard_normal(shape).astype(dtype)


def _compiled_fwd_bwd(fn, arrays, g):
    ts = [tj.tensor(arrays[0], requires_grad=True)] + [tj.tensor(a) for a in arrays[1:]]
    cf = tj.compile(fn)
    for _ in range(2):          # the capturing call, then the cached plan
        for t in ts:
            t.grad = None
        y = cf(*ts)
        (y * tj.tensor(g)).sum().backward()
    return cf, y.detach().numpy(), ts[0].grad.numpy()


def _torch_fwd_bwd(fn, arrays, g):
    ts = [torch.tensor(np.array(a), requires_grad=(i == 0)) for i, a in enumerate(arrays)]
    y = fn(*ts)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), ts[0].grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_alone_matches_torch_forward_and_backward(all_windows, kind, geo, dtype):
    k, s, p = geo
    for strided in (False, True):
        x = _input(dtype, (2, 3, 7, 9), strided)
        fn = lambda t: _pool(kind)(t, k, s, p)                      # noqa: E731
        tfn = lambda t: _torch_pool(kind)(t, k, s, p)               # noqa: E731
        ref_y, _ = _torch_fwd_bwd(tfn, [x], np.ones(1, dtype))
        g = np.random.default_rng(1).standard_normal(ref_y.shape).astype(dtype)
        ref_y, ref_gx = _torch_fwd_bwd(tfn, [x], g)
        cf, y, gx = _compiled_fwd_bwd(fn, [x], g)
        np.testing.assert_allclose(y, ref_y, **TOL[dtype])
        np.testing.assert_allclose(gx, ref_gx, **TOL[dtype])
    fwd, bwd = _plans(cf)
    assert any(it.window is not None for it in _groups(fwd)), fwd.describe()
    assert any(it.window is not None for it in _groups(bwd)), bwd.describe()


def test_pooling_alone_equals_eager_bit_for_bit(all_windows):
    """The generated kernels keep the numpy forms' order of operations and rules."""
    x = tj.tensor(_input(np.float32, (3, 4, 11, 8), False), requires_grad=True)
    for k, s, p in GEOMETRIES:
        assert_compiled_matches(lambda t: F.max_pool2d(t, k, s, p) * 1.5, x, rtol=0, atol=0)
        assert_compiled_matches(lambda t: F.avg_pool2d(t, k, s, p) * 1.5, x, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_overlapping_windows_run_by_rows_bit_for_bit(all_windows, kind):
    """A gather whose windows overlap spreads each window row's gradients over a row of sums
    (the ReLU's gradient fused behind it), a padded average folds a row of outputs per
    window position: the eager results bit for bit, for a long 1 x 7 window, rows of length 1
    (the same kernels), a dilated window and a transposed input."""
    cases = [((2, 3, 5, 13), (1, 7), (1, 1), (0, 3), (1, 1), False),
             ((3, 2, 9, 1), (1, 7), (1, 1), (0, 3), (1, 1), False),
             ((2, 3, 9, 11), (2, 3), (1, 2), (1, 1), (2, 2), True)]
    sources = []
    for shape, k, s, p, d, strided in cases:
        x = tj.tensor(_input(np.float32, shape, strided), requires_grad=True)
        if kind == "max":
            fn = lambda t: F.max_pool2d(F.relu(t), k, s, p, dilation=d) * 1.5   # noqa: E731
        elif d != (1, 1):
            continue
        else:
            fn = lambda t: F.avg_pool2d(F.relu(t), k, s, p) * 1.5               # noqa: E731
        fwd, bwd = _plans(assert_compiled_matches(fn, x, rtol=0, atol=0))
        sources += fwd.kernel_sources() + bwd.kernel_sources()
    src = "".join(sources)
    assert "row[np.uintp(ox * " in src and ("racc[ox]" in src) == (kind == "avg")


def _bn_relu_pool(kind, geo):
    k, s, p = geo

    def fn(x, a, b):
        return _pool(kind)(F.relu(x * a + b), k, s, p)
    return fn


def _torch_bn_relu_pool(kind, geo):
    k, s, p = geo
    return lambda x, a, b: _torch_pool(kind)(torch.relu(x * a + b), k, s, p)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("mode", ["auto", "all"])
def test_normalize_relu_fuses_into_the_pooling(monkeypatch, mode, kind, dtype):
    monkeypatch.setenv("TRACEJIT_WINDOWS", mode)
    rng = np.random.default_rng(2)
    geo = GEOMETRIES[1]
    x = _input(dtype, (2, 5, 9, 7), True)
    a = rng.standard_normal((1, 5, 1, 1)).astype(dtype)
    b = rng.standard_normal((1, 5, 1, 1)).astype(dtype)
    g = graph_of(_bn_relu_pool(kind, geo), [x, a, b])
    items = partition(g)
    assert_valid_partition(items, g)
    (win,) = [it for it in items if isinstance(it, Group) and it.window is not None]
    assert [e.prim.name for e in win.eqns] == ["mul", "add", "relu"][:len(win.eqns)] and win.eqns
    assert all(tuple(v.aval.shape) != (2, 5, 9, 7) for v in win.outputs)   # never written
    assert group_label(win).startswith(f"fused group {win.gid} (mul, add")
    assert f"{win.window.prim.name} (window)) from test_windows_group.py:" in group_label(win)
    ref_y, _ = _torch_fwd_bwd(_torch_bn_relu_pool(kind, geo), [x, a, b], np.ones(1, dtype))
    gy = rng.standard_normal(ref_y.shape).astype(dtype)
    ref_y, ref_gx = _torch_fwd_bwd(_torch_bn_relu_pool(kind, geo), [x, a, b], gy)
    cf, y, gx = _compiled_fwd_bwd(_bn_relu_pool(kind, geo), [x, a, b], gy)
    np.testing.assert_allclose(y, ref_y, **TOL[dtype])
    np.testing.assert_allclose(gx, ref_gx, **TOL[dtype])
    _, bwd = _plans(cf)
    # the pooling's gradient is gathered inside the group that computes the ReLU's and
    # the normalize's gradient: the scattered gradient is never written (the max's
    # scatter only where every pooling is taken: "auto" keeps its registered kernel)
    gws = [it for it in _groups(bwd) if it.window is not None]
    if kind == "max" and mode == "auto":
        assert not gws, bwd.describe()
        return
    (gw,) = gws
    assert gw.eqns and gw.window.out not in gw.outputs, bwd.describe()


def test_nan_and_inf_windows_follow_the_first_maximum_rules(all_windows):
    x = _input(np.float32, (1, 2, 6, 6), False)
    x[0, 0, 0, 1] = np.nan
    x[0, 0, 2, 2] = np.inf
    x[0, 1, 4:, 4:] = -np.inf
    x[0, 1, 0, 0] = x[0, 1, 0, 1] = 7.0          # equal maxima: the first takes the gradient
    t = tj.tensor(x, requires_grad=True)
    assert_compiled_matches(lambda v: F.max_pool2d(v, 2, 2) * 2.0, t, rtol=0, atol=0)
    assert_compiled_matches(lambda v: F.max_pool2d(v, 3, 1, 1) * 2.0, t, rtol=0, atol=0)


def test_auto_takes_every_forward_and_the_average_backward():
    x = _input(np.float32, (2, 3, 8, 8), False)
    for fn, prims in [(lambda t: F.max_pool2d(t, 2) * 2.0, {"max_pool2d_with_offsets"}),
                      (lambda t: F.avg_pool2d(t, 2) * 2.0, {"avg_pool2d"})]:
        g = graph_of(fn, [x])
        got = {it.window.prim.name for it in partition(g, windows="auto")
               if isinstance(it, Group) and it.window is not None}
        assert got == prims


def test_large_planes_run_the_parallel_variant(all_windows):
    x = tj.tensor(_input(np.float32, (16, 32, 26, 26), False), requires_grad=True)
    cf = assert_compiled_matches(lambda t: F.max_pool2d(F.relu(t * 0.5 + 0.1), 2), x,
                                 interpreter=False, rtol=0, atol=0)
    fwd, _ = _plans(cf)
    src = "".join(fwd.kernel_sources())
    # numba's parallel loop, or a chunk kernel whose shares of the planes run on the
    # runtime's threads (where the process has them: codegen_chunks.paired)
    assert "for plane in prange(d0 * d1)" in src or "chunk_t * d0 * d1 // chunk_nt" in src


def test_windows_none_keeps_the_pooling_steps(monkeypatch):
    monkeypatch.setenv("TRACEJIT_WINDOWS", "none")
    x = _input(np.float32, (2, 3, 8, 8), False)
    g = graph_of(_bn_relu_pool("max", GEOMETRIES[0]), [x, x[:1, :, :1, :1], x[:1, :, :1, :1]])
    assert not any(isinstance(it, Group) and it.window is not None for it in partition(g))
    with pytest.raises(ValueError, match="windows must be one of"):
        partition(g, windows="some")


@pytest.mark.parametrize("geo", TILING)
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("mode", ["auto", "all"])
def test_tiling_gather_with_fused_steps_matches_torch(monkeypatch, mode, kind, geo):
    """The gather walked per window (tiling windows, rows and columns past the last
    window included: 9 x 7 planes) with the normalize's and ReLU's gradients behind it;
    "auto" takes the max's scatter too where the windows tile."""
    monkeypatch.setenv("TRACEJIT_WINDOWS", mode)
    rng = np.random.default_rng(4)
    x = _input(np.float64, (2, 5, 9, 7), True)
    a = rng.standard_normal((1, 5, 1, 1))
    b = rng.standard_normal((1, 5, 1, 1))
    ref_y, _ = _torch_fwd_bwd(_torch_bn_relu_pool(kind, geo), [x, a, b], np.ones(1))
    gy = rng.standard_normal(ref_y.shape)
    ref_y, ref_gx = _torch_fwd_bwd(_torch_bn_relu_pool(kind, geo), [x, a, b], gy)
    cf, y, gx = _compiled_fwd_bwd(_bn_relu_pool(kind, geo), [x, a, b], gy)
    np.testing.assert_allclose(y, ref_y, **TOL[np.float64])
    np.testing.assert_allclose(gx, ref_gx, **TOL[np.float64])
    _, bwd = _plans(cf)
    (gw,) = [it for it in _groups(bwd) if it.window is not None]
    assert gw.eqns and gw.window.out not in gw.outputs, bwd.describe()
    assert "for ox in range(ow)" in "".join(bwd.kernel_sources())


def _plans(cf):
    prog = cf._entries[-1].executor
    fwd, bwd, _ = next(iter(prog._train.values()))
    return fwd, bwd


def _groups(plan):
    return [it for it in plan.items if isinstance(it, Group)]
