"""conv2d as ops/conv_gemm.py's three primitives and their blocked CPU implementations
(compiler/cpu/kernels/conv_blocks.py, conv_direct.py): values and both gradients against
PyTorch with the same weights (eager and compiled), the blocked forms against the numpy
forms, blocks of several images and of one, and the VJPs of the gradient primitives
(double backward).
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.kernels import conv_blocks as B
from tracejit.ops import conv_gemm as G

# (N, C, H, W, O, kernel, stride, padding, dilation, groups, bias)
CASES = [
    (2, 3, 7, 9, 4, (3, 2), (2, 1), (1, 0), (1, 2), 1, True),
    (1, 5, 8, 8, 6, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),
    (3, 4, 11, 10, 5, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    (3, 6, 9, 7, 4, (3, 3), (2, 2), (2, 1), (1, 1), 2, True),
    (4, 8, 5, 13, 8, (5, 3), (1, 3), (2, 0), (1, 1), 1, False),
    (1, 2, 6, 5, 3, (4, 4), (2, 2), (1, 1), (1, 1), 1, True),
    # few output channels over long rows: the direct kernel (conv_direct.py), for the
    # forward and, with no more output than input channels, the input gradient too
    (2, 3, 4, 66, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    (1, 8, 6, 64, 8, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),
    (2, 4, 7, 68, 2, (3, 2), (2, 1), (2, 1), (2, 2), 1, True),
    # groups: a product per group on its slice of the columns
    (2, 6, 20, 70, 12, (3, 5), (1, 1), (2, 2), (1, 2), 3, True),     # input gradient as a forward
    (3, 8, 7, 12, 8, (3, 2), (1, 2), (1, 0), (1, 1), 4, False),
    (2, 6, 6, 80, 6, (1, 8), (1, 8), (0, 0), (1, 1), 3, True),       # over the input's phases
    (2, 16, 5, 5, 32, (1, 1), (1, 1), (0, 0), (1, 1), 8, True),      # 1x1, short images
    (2, 4, 10, 10, 6, (1, 1), (1, 1), (0, 0), (1, 1), 2, False),     # 1x1
    (1, 16, 6, 6, 16, (3, 3), (1, 1), (1, 1), (1, 1), 8, True),      # one image (a modulated conv)
]


def _torch_conv(torch, x, w, b, stride, padding, dilation, groups, u):
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    tb = None if b is None else torch.tensor(b, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw, tb, stride, padding, dilation, groups)
    y.backward(torch.tensor(u))
    return [y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()] + ([] if b is None else [tb.grad.numpy()])


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_conv2d_and_gradients_match_torch(case, dtype, compiled):
    torch = pytest.importorskip("torch")
    n, c, h, w, o, k, s, p, d, groups, bias = case
    rng = np.random.default_rng(hash(case) % 1000)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c // groups) + k).astype(dtype)
    b = rng.standard_normal(o).astype(dtype) if bias else None
    shape = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), None, s, p, d, groups).shape
    u = rng.standard_normal(tuple(shape)).astype(dtype)
    ref = _torch_conv(torch, x, wt, b, s, p, d, groups, u)

    def loss(xx, ww, bb):
        return (F.conv2d(xx, ww, bb, s, p, d, groups) * tj.tensor(u)).sum()
    jx, jw = tj.tensor(x, requires_grad=True), tj.tensor(wt, requires_grad=True)
    jb = None if b is None else tj.tensor(b, requires_grad=True)
    f = tj.script(loss) if compiled else loss
    for _ in range(2 if compiled else 1):
        for t in (jx, jw, jb):
            if t is not None:
                t.grad = None
        f(jx, jw, jb).backward()
    y = F.conv2d(jx, jw, jb, s, p, d, groups).detach().numpy()
    got = [y, jx.grad.numpy(), jw.grad.numpy()] + ([] if b is None else [jb.grad.numpy()])
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, r in zip(got, ref):
        assert a.shape == r.shape and a.dtype == dtype
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("groups", [1, 2])
def test_weight_and_bias_gradients_of_an_input_without_grad(groups):
    # the weight's values are not saved then: the gradients' shapes come from the input's
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    grads = []
    for T in (torch, tj):
        tw, tb = T.tensor(w, requires_grad=True), T.tensor(b, requires_grad=True)
        (T.nn.functional.conv2d(T.tensor(x), tw, tb, 1, 1, 1, groups) ** 2).sum().backward()
        grads.append((tw.grad.numpy(), tb.grad.numpy()))
    for a, r in zip(grads[1], grads[0]):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-3)


def _channel_major(a):
    """`a` (N, C, ...) in (C, N, ...) memory, as BatchNorm's eager results come."""
    return np.ascontiguousarray(a.swapaxes(0, 1)).swapaxes(0, 1)


@pytest.mark.parametrize("channel_major", [False, True])
@pytest.mark.parametrize("block", [1 << 19, 1])   # several images a block; one
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", [((3, 3), (1, 1), (1, 1), (1, 1), 1), ((2, 3), (2, 1), (0, 1), (2, 1), 1),
                                 ((1, 1), (1, 1), (0, 0), (1, 1), 1), ((3, 3), (1, 1), (1, 1), (1, 1), 3),
                                 ((2, 3), (2, 1), (0, 1), (2, 1), 3)])
def test_blocked_forms_match_numpy_forms(monkeypatch, geo, dtype, block, channel_major):
    monkeypatch.setattr(B, "_BLOCK_BYTES", block)
    k, s, p, d, groups = geo
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 6, 9, 11)).astype(dtype)
    o = 7 if groups == 1 else 9
    w = rng.standard_normal((o, 6 // groups) + k).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    params = dict(kernel=k, stride=s, padding=p, dilation=d, **({"groups": groups} if groups > 1 else {}))
    y, yr = B.forward(x, w, **params), G._fwd_impl(np, x, w, **params)
    yb, ybr = B.forward(x, w, b, **params), G._fwd_impl(np, x, w, b, **params)
    g = rng.standard_normal(y.shape).astype(dtype)
    if channel_major:
        x, g = _channel_major(x), _channel_major(g)
        y = B.forward(x, w, **params)
    dw, dwr = B.wgrad(g, x, **params), G._wgrad_impl(np, g, x, **params)
    rec, recr = B.wgrad(g, x, bias=True, **params), G._wgrad_impl(np, g, x, bias=True, **params)
    np.testing.assert_allclose(recr[-o:], g.sum((0, 2, 3)), rtol=1e-5)   # the bias's gradient last
    dx, dxr = B.xgrad(g, w, (9, 11), **params), G._xgrad_impl(np, g, w, (9, 11), **params)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ybr - yr, np.broadcast_to(b.reshape(1, o, 1, 1), yr.shape), rtol=tol, atol=tol)
    for a, r in ((y, yr), (yb, ybr), (dw, dwr), (rec, recr), (dx, dxr)):
        assert a.shape == r.shape and a.dtype == dtype and a.flags.c_contiguous
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol)


def test_conv2d_and_conv_transpose2d_are_the_blocked_primitives():
    from tracejit.ops import impls
    for prim, fn in ((G.CONV2D_GEMM, B.forward), (G.CONV2D_WGRAD, B.wgrad), (G.CONV2D_XGRAD, B.xgrad)):
        assert fn in [getattr(i.fn, "__wrapped__", i.fn) for i in impls.implementations(prim)]
    conv = tj.nn.Conv2d(3, 4, 3, padding=1)
    up = tj.nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)
    f = tj.script(lambda x: up(conv(x)).sum())
    f(tj.tensor(np.ones((2, 3, 6, 6), np.float32))).backward()
    names = [e.prim.name for e in f.entries[0].opt_graph.eqns]
    assert "conv2d_gemm" in names and "conv2d_xgrad" in names and "unfold" not in names, names


@pytest.mark.parametrize("groups", [1, 2])
def test_gradient_primitives_have_gradients(groups):
    """conv2d_wgrad and conv2d_xgrad differentiate (double backward) as finite differences do."""
    rng = np.random.default_rng(11)
    x0 = rng.standard_normal((2, 3 * groups, 6, 5))
    w0 = rng.standard_normal((4, 3, 3, 2))
    g0 = rng.standard_normal((2, 4, 3, 4))
    geo = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 1), groups=groups)

    def f(x, w, g):
        dw = G.conv2d_wgrad(g, x, (3, 2), **geo)
        dx = G.conv2d_xgrad(g, w, (6, 5), **geo)
        return (dw * dw).sum() + (dx * dx).sum()
    args = [tj.tensor(a, requires_grad=True) for a in (x0, w0, g0)]
    f(*args).backward()
    eps = 1e-6
    for i, a0 in enumerate((x0, w0, g0)):
        idx = tuple(rng.integers(0, s) for s in a0.shape)
        up, dn = [a.copy() for a in (x0, w0, g0)], [a.copy() for a in (x0, w0, g0)]
        up[i][idx] += eps
        dn[i][idx] -= eps
        num = (f(*map(tj.tensor, up)).item() - f(*map(tj.tensor, dn)).item()) / (2 * eps)
        assert abs(args[i].grad.numpy()[idx] - num) < 1e-5 * max(1.0, abs(num))


def test_shape_errors_name_the_operands():
    x = tj.tensor(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(tj.errors.ShapeError, match="conv2d_gemm"):
        G.conv2d_gemm(x, tj.tensor(np.zeros((2, 4, 3, 3), np.float32)))
    with pytest.raises(tj.errors.ShapeError, match="conv2d_wgrad"):
        G.conv2d_wgrad(tj.tensor(np.zeros((1, 2, 3, 3), np.float32)), x, (3, 3))
    with pytest.raises(tj.errors.ShapeError, match="groups=2"):    # 3 channels in 2 groups
        G.conv2d_wgrad(tj.tensor(np.zeros((1, 2, 2, 2), np.float32)), x, (3, 3), groups=2)


@pytest.mark.parametrize("cpus", [1, 2, 4])
def test_blocks_fit_the_cache_and_give_each_core_one(monkeypatch, cpus):
    """A block's columns stay within `_BLOCK_BYTES` (within `_BLOCK_MAX_BYTES` where it
    takes more images to do `_BLOCK_MIN_WORK`); a batch whose columns all fit is still
    cut into a block per core (one block ran its GEMM on one core)."""
    monkeypatch.setattr(B._coreshare.core_share, "cpus", cpus)
    monkeypatch.setattr(B._sharepool, "split", lambda fn, n, work: fn(0, n))
    for min_work, bound in ((0, B._BLOCK_BYTES), (B._BLOCK_MIN_WORK, B._BLOCK_MAX_BYTES)):
        monkeypatch.setattr(B, "_BLOCK_MIN_WORK", min_work)
        for n, per_image in ((7, 1000), (7, B._BLOCK_BYTES // 3), (1, 1000), (5, 10 * B._BLOCK_BYTES)):
            got = []
            B._blocks(lambda s, e, nb: got.append((s, e)), n, per_image, 1)
            assert [s for s, _ in got] == sorted(s for s, _ in got) and got[0][0] == 0 and got[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
            size = max(e - s for s, e in got)
            assert size * per_image <= bound or size == 1
            assert len(got) >= min(n, cpus)


# (x shape, weight shape, stride, padding, dilation, groups): the blocked forms, depthwise
CASES_1D = [((2, 4, 9), (6, 2, 4), 2, 1, 2, 2), ((2, 6, 17), (12, 1, 5), 2, 2, 2, 6)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case,dtype", [(CASES_1D[0], np.float32), (CASES_1D[0], np.float64),
                                        (CASES_1D[1], np.float32)])   # (float64 depthwise: its own kernels)
def test_conv1d_is_one_record_equal_to_torch(case, dtype, threads, thread_counts_back):
    """conv1d binds the convolution primitive on its 3-D operands: one record whose inputs
    are the leaves themselves (no views of them), values and gradients PyTorch's."""
    torch = pytest.importorskip("torch")
    tj.set_num_threads(threads)
    xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1])]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    jt = [tj.tensor(a, requires_grad=True) for a in arrays]
    ro = torch.nn.functional.conv1d(*tt, stride, padding, dilation, groups)
    jo = F.conv1d(*jt, stride, padding, dilation, groups)
    assert jo.grad_fn.name() == "ConvolutionBackward0"
    assert [type(f).__name__ for f, _ in jo.grad_fn.next_functions] == ["AccumulateGrad"] * 3
    u = rng.standard_normal(tuple(ro.shape)).astype(dtype)
    ro.backward(torch.tensor(u))
    jo.backward(tj.tensor(u))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(jo.detach().numpy(), ro.detach().numpy(), rtol=tol, atol=tol)
    for a, r in zip(jt, tt):
        np.testing.assert_allclose(a.grad.numpy(), r.grad.numpy(), rtol=tol, atol=tol)


def test_a_1d_convolution_takes_3d_operands():
    with pytest.raises(tj.errors.ShapeError, match="1-d convolution takes 3-D operands"):
        G.conv2d_gemm(tj.ones(2, 3, 4, 5), tj.ones(2, 3, 3))


def _sums_reference(g):
    return g.astype(np.float64).sum((0,) + tuple(range(2, g.ndim)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_bias_gradient_sums_in_every_layout(dtype):
    """A bias's gradient alone (`conv_bgrad`): g summed over all but its channel dim, in g's
    dtype, for row-major, channel-major, strided, one-image, one-position and empty
    gradients."""
    rng = np.random.default_rng(11)
    g = rng.standard_normal((5, 6, 7, 9)).astype(dtype)
    tol = 2e-2 if dtype == np.float16 else 1e-4 if dtype == np.float32 else 1e-12
    for a in (g, _channel_major(g), g[:, :, ::2, 1:], g[:1], g[:, :, :1, :1], g[:, :, :, :3].copy()):
        got = G.conv_bgrad(tj.tensor(a)).numpy()
        assert got.shape == (a.shape[1],) and got.dtype == dtype
        np.testing.assert_allclose(got, _sums_reference(a), rtol=tol, atol=tol * 10)
    assert np.array_equal(G.conv_bgrad(tj.tensor(np.zeros((0, 3, 4), dtype))).numpy(), np.zeros(3, dtype))
    with pytest.raises(tj.errors.ShapeError, match="conv_bgrad"):
        G.conv_bgrad(tj.ones(4))


def test_conv_bgrad_has_a_gradient():
    """conv_bgrad's VJP: the cotangent (C,) broadcast over the gradient's other dims."""
    rng = np.random.default_rng(2)
    g = tj.tensor(rng.standard_normal((3, 4, 5)), requires_grad=True)
    v = rng.standard_normal(4)
    (G.conv_bgrad(g) * tj.tensor(v)).sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), np.broadcast_to(v[None, :, None], (3, 4, 5)))


@pytest.mark.parametrize("conv1d", [False, True])
def test_weight_and_bias_gradients_are_pytorchs_eager_and_compiled_alike(conv1d):
    """A convolution's weight and bias gradients equal PyTorch's, and eager and a captured
    graph take them from one record: the same sums, bit for bit."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4, 10) if conv1d else (3, 4, 6, 7))
    w = rng.standard_normal((6, 2, 3) if conv1d else (6, 2, 3, 2))
    b = rng.standard_normal(6)
    fn = "conv1d" if conv1d else "conv2d"
    grads = {}
    for name, T, wrap in (("torch", torch, lambda f: f), ("eager", tj, lambda f: f), ("compiled", tj, tj.script)):
        tw, tb = T.tensor(w, requires_grad=True), T.tensor(b, requires_grad=True)
        step = wrap(lambda xx, ww, bb: (getattr(T.nn.functional, fn)(xx, ww, bb, 1, 1, 1, 2) ** 2).sum())
        step(T.tensor(x), tw, tb).backward()
        grads[name] = (tw.grad.numpy(), tb.grad.numpy())
    for a, r in zip(grads["eager"], grads["torch"]):
        np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-10)
    for a, c in zip(grads["eager"], grads["compiled"]):
        np.testing.assert_array_equal(a, c)


# (N, C, H, W, O, kernel, stride, padding, dilation, groups, blocked): batches past the
# threads, one image; `blocked`: run by blocks of images (a 1x1 window over short images
# with groups is one product over the batch)
THREAD_CASES = [
    (9, 4, 10, 11, 6, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    (7, 6, 9, 9, 6, (3, 2), (2, 1), (1, 0), (2, 1), 3, True),
    (9, 8, 6, 6, 8, (1, 1), (1, 1), (0, 0), (1, 1), 2, False),
    (6, 8, 9, 9, 4, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    (1, 4, 12, 12, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", THREAD_CASES)
def test_thread_counts_1_2_4_give_the_same_results(monkeypatch, thread_counts_back, case, dtype):
    """With `set_num_threads` at 1, 2 and 4 (on 4 CPUs, whatever the machine's count) a
    convolution's value and gradients agree, and equal PyTorch's, whether or not the batch
    is split into per-CPU blocks."""
    torch = pytest.importorskip("torch")
    from tracejit.compiler.cpu.runtime import sharepool
    n, c, h, w, o, k, s, p, d, groups, blocked = case
    rng = np.random.default_rng(n + c + o)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c // groups) + k).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    u = rng.standard_normal(tuple(torch.nn.functional.conv2d(
        torch.tensor(x), torch.tensor(wt), None, s, p, d, groups).shape)).astype(dtype)
    ref = _torch_conv(torch, x, wt, b, s, p, d, groups, u)
    monkeypatch.setattr(B._coreshare.core_share, "cpus", 4)
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 0)      # (a block per CPU wherever columns fit)
    monkeypatch.setattr(sharepool, "SPLIT_MIN_WORK", 0)
    splits = []
    split = sharepool.split
    monkeypatch.setattr(sharepool, "split", lambda fn, count, work: splits.append(count) or split(fn, count, work))
    results = {}
    for threads in (1, 2, 4):
        tj.set_num_threads(threads)
        monkeypatch.setattr(sharepool, "pool_threads", lambda t=threads: t)
        splits.clear()
        jx, jw, jb = (tj.tensor(a, requires_grad=True) for a in (x, wt, b))
        y = F.conv2d(jx, jw, jb, s, p, d, groups)
        y.backward(tj.tensor(u))
        results[threads] = [y.detach().numpy(), jx.grad.numpy(), jw.grad.numpy(), jb.grad.numpy()]
    tol = 1e-5 if dtype == np.float32 else 1e-12      # (blocks' sums in another order: rounding)
    for threads in (2, 4):
        for a, r in zip(results[threads], results[1]):
            np.testing.assert_allclose(a, r, rtol=tol, atol=tol * np.abs(r).max())
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, r in zip(results[1], ref):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol * 10)
