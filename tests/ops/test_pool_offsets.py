"""Floating max-pooling through its record (ops/pool_offsets.py): the forward records each
window's first-maximum offset, the backward scatters g there without reading the input.

Checked: the record's kernels equal their numpy forms (values, offsets, gradients; ties,
NaN, -inf, padding, dilation, channel-major eager activations); the scatter from the
record equals the gradient found again from the input (inputs.py `first_max_grad`) bit for bit;
ties and gradients against PyTorch, second derivatives included; eager vs compiled; the
compiled backward keeps the record, not the pooled input; the shape rules' errors.
"""
from __future__ import annotations

import numpy as np
import pytest
from inputs import first_max_grad, pool_input

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.errors import ShapeError
from tracejit.jit.autodiff import split
from tracejit.ops import pool_offsets as O, pooling_prim as P
from tracejit.compiler.cpu.kernels import window_forms as WF
from tracejit.compiler.windows import tiles

GEOMETRIES = [((2, 2), (2, 2), (0, 0), (1, 1)),    # tiles (LeNet)
              ((3, 3), (2, 2), (1, 1), (1, 1)),    # overlap + padding
              ((3, 2), (1, 2), (1, 1), (2, 1)),    # rectangular, dilation
              ((2, 3), (2, 3), (0, 0), (1, 1))]    # rectangular tiles, rows/columns left over




def _numpy_forms(monkeypatch):
    monkeypatch.setattr(WF, "_fn", lambda *a: None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("kind", ["normal", "ties", "nan", "-inf", "channel-major"])
def test_record_and_scatter_equal_numpy_forms_and_the_reread_gradient(monkeypatch, dtype, geo, kind):
    pytest.importorskip("numba")
    x = pool_input(kind, dtype)
    rec = O.MAX_POOL2D_WITH_OFFSETS.run(np, x, *geo)
    out_old = P.MAX_POOL2D.run(np, x, *geo)
    g = np.random.default_rng(3).standard_normal(out_old.shape).astype(dtype)
    gx = O.MAX_POOL2D_SCATTER.run(np, g, rec, x.shape, *geo)
    gx_old = first_max_grad(g, x, *geo)
    with monkeypatch.context() as m:
        _numpy_forms(m)
        rec_np = O.MAX_POOL2D_WITH_OFFSETS.run(np, x, *geo)
        gx_np = O.MAX_POOL2D_SCATTER.run(np, g, rec_np, x.shape, *geo)
    assert rec.shape == (2,) + out_old.shape and rec.dtype == dtype
    np.testing.assert_array_equal(rec, rec_np)             # values and offsets (NaN == NaN)
    np.testing.assert_array_equal(rec[0], out_old)
    np.testing.assert_array_equal(O._values_impl(np, rec, x, *geo), out_old)
    # the scatter from the record is the gradient found again from x: the numpy form bit for
    # bit; the kernel too where windows tile (overlapping ones it adds in another order)
    np.testing.assert_array_equal(gx_np, gx_old)
    if tiles(geo[0], geo[1], geo[3]):
        np.testing.assert_array_equal(gx, gx_old)
    else:
        np.testing.assert_allclose(gx, gx_old, rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert gx.dtype == dtype and gx.shape == x.shape
    if kind == "channel-major":   # eager activations keep their order (the ReLU after reads both)
        assert WF.channel_major(rec[0]) and WF.channel_major(gx)


def test_kernels_ran():
    """The comparison above is not numpy against itself: in sync mode the kernels load."""
    pytest.importorskip("numba")
    x = np.zeros((1, 1, 4, 4), np.float32)
    rec = WF.forward_offsets(x, kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    assert rec is not None and rec.shape == (2, 1, 1, 2, 2)
    assert WF.scatter(rec[0], rec, x.shape, kernel=(2, 2), stride=(2, 2), padding=(0, 0),
                      dilation=(1, 1)) is not None


def test_offsets_are_the_first_maximum_and_the_last_nan():
    x = np.array([[[[1., 3., 3., 0.],
                    [3., 2., 1., 1.],
                    [np.nan, 0., 5., 5.],
                    [1., np.nan, 5., 5.]]]], np.float32)
    for run in (lambda: O.MAX_POOL2D_WITH_OFFSETS.run(np, x, (2, 2), (2, 2), (0, 0), (1, 1)),):
        rec = run()
        np.testing.assert_array_equal(rec[0, 0, 0], [[3., 3.], [np.nan, 5.]])
        np.testing.assert_array_equal(rec[1, 0, 0], [[1., 0.], [3., 0.]])


def test_gradients_and_ties_match_torch_with_second_derivatives():
    torch = pytest.importorskip("torch")
    # ties at a positive maximum and ReLU zeros, overlapping windows and padding
    for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=(2, 3), stride=1, dilation=(2, 1))):
        x0 = np.maximum(np.round(np.random.default_rng(5).standard_normal((2, 3, 8, 9)) * 2), 0)
        w0 = np.random.default_rng(6).standard_normal(F.max_pool2d(tj.tensor(x0), **kw).shape)
        xt = torch.tensor(x0, requires_grad=True)
        yt = torch.nn.functional.max_pool2d(xt, **kw)
        (gt,) = torch.autograd.grad((yt * torch.tensor(w0)).sum(), xt, create_graph=True)
        (ggt,) = torch.autograd.grad((gt * gt).sum(), xt, allow_unused=True)
        x = tj.tensor(x0, requires_grad=True)
        y = F.max_pool2d(x, **kw)
        np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
        (g,) = tj.autograd.grad((y * tj.tensor(w0)).sum(), x, create_graph=True)
        np.testing.assert_array_equal(g.detach().numpy(), gt.detach().numpy())
        # grad of grad w.r.t. the cotangent path: d/dw of sum(g^2) through take/scatter
        wv = tj.tensor(w0, requires_grad=True)
        (g2,) = tj.autograd.grad((F.max_pool2d(x, **kw) * wv).sum(), x, create_graph=True)
        (gw,) = tj.autograd.grad((g2 * g2).sum(), wv)
        wt = torch.tensor(w0, requires_grad=True)
        (g2t,) = torch.autograd.grad((torch.nn.functional.max_pool2d(xt, **kw) * wt).sum(), xt,
                                     create_graph=True)
        (gwt,) = torch.autograd.grad((g2t * g2t).sum(), wt)
        np.testing.assert_allclose(gw.numpy(), gwt.numpy(), rtol=1e-12, atol=1e-12)
        assert ggt is None or not ggt.any()   # zero w.r.t. x in both


def test_compiled_matches_eager_and_keeps_the_record_not_the_input():
    def loss(x, w):
        return (F.max_pool2d(tj.relu(x * 1.5), 2) * w).sum()

    x0 = np.random.default_rng(0).standard_normal((4, 3, 10, 10)).astype(np.float32)
    w = tj.tensor(np.random.default_rng(1).standard_normal((4, 3, 5, 5)).astype(np.float32))
    xe = tj.tensor(x0, requires_grad=True)
    loss(xe, w).backward()
    cf = tj.script(loss)
    for _ in range(2):
        xc = tj.tensor(x0, requires_grad=True)
        cf(xc, w).backward()
        np.testing.assert_array_equal(xc.grad.numpy(), xe.grad.numpy())
    (entry,) = cf.entries
    g = entry.opt_graph
    fwd, bwd, n_saved = split(g, [True, False])
    names = [e.prim.name for e in bwd.eqns]
    assert "max_pool2d_scatter" in names and "max_pool2d_backward" not in names, names
    saved = fwd.outputs[len(fwd.outputs) - n_saved:]
    shapes = [tuple(v.aval.shape) for v in saved]
    assert (2, 4, 3, 5, 5) in shapes and (4, 3, 10, 10) not in shapes, shapes


def test_integer_inputs_keep_the_max_pool2d_primitive():
    x = tj.tensor(np.arange(16, dtype=np.int32).reshape(1, 1, 4, 4))
    out = F.max_pool2d(x, 2)
    np.testing.assert_array_equal(out.numpy()[0, 0], [[5, 7], [13, 15]])
    assert out.dtype == tj.int32


def test_rules_name_the_mismatch():
    x = tj.zeros(1, 1, 4, 4)
    rec = O.max_pool2d_with_offsets(x, (2, 2), (2, 2))
    with pytest.raises(ShapeError, match="max_pool2d_values: record of shape"):
        O.max_pool2d_values(rec, tj.zeros(1, 1, 6, 6), (2, 2), (2, 2))
    with pytest.raises(ShapeError, match="max_pool2d_scatter: gradient shape"):
        O.max_pool2d_scatter(tj.zeros(1, 1, 3, 3), rec, (1, 1, 4, 4), (2, 2), (2, 2))
    with pytest.raises(TypeError, match="floating point input, got int32"):
        O.max_pool2d_with_offsets(tj.zeros(1, 1, 4, 4, dtype=tj.int32), (2, 2), (2, 2))


@pytest.mark.parametrize("geo", GEOMETRIES)
def test_numpy_scatter_gives_negative_zero_as_positive_zero_and_float16(monkeypatch, geo):
    """The numpy scatter adds g to zeros, as PyTorch's backward: a -0.0 gradient lands as
    +0.0 (bitwise) whether windows overlap or not; float16 (numpy form only) equals float32."""
    _numpy_forms(monkeypatch)
    x = pool_input("ties", np.float32)
    rec = O.MAX_POOL2D_WITH_OFFSETS.run(np, x, *geo)
    g = np.random.default_rng(5).standard_normal(rec.shape[1:]).astype(np.float32)
    g[..., ::2] = -0.0
    gx = O.MAX_POOL2D_SCATTER.run(np, g, rec, x.shape, *geo)
    assert not np.signbit(gx[gx == 0]).any()
    np.testing.assert_array_equal(gx, first_max_grad(g, x, *geo))
    rec16 = O.MAX_POOL2D_WITH_OFFSETS.run(np, x.astype(np.float16), *geo)
    np.testing.assert_array_equal(rec16, rec.astype(np.float16))
    gx16 = O.MAX_POOL2D_SCATTER.run(np, g.astype(np.float16), rec16, x.shape, *geo)
    np.testing.assert_allclose(gx16, gx, rtol=2e-3, atol=2e-3)
    assert gx16.dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_kernels_give_negative_zero_as_positive_zero(dtype, geo):
    """The numba scatter (tiled windows write g's bits instead of adding to zeros) gives a
    -0.0 gradient as +0.0 too, as PyTorch and the numpy forms do."""
    x = pool_input("ties", dtype)
    kw = dict(zip(("kernel", "stride", "padding", "dilation"), geo))
    rec = WF.forward_offsets(x, **kw)
    g = np.random.default_rng(5).standard_normal(rec.shape[1:]).astype(dtype)
    g[..., ::2] = -0.0
    gx = WF.scatter(g, rec, x.shape, **kw)
    assert gx is not None
    assert (gx == 0).any() and not np.signbit(gx[gx == 0]).any()


@pytest.mark.parametrize("compiled", [False, True])
def test_values_view_the_record_and_an_inplace_relu_after_pooling_keeps_the_gradient(compiled):
    # max_pool2d_values is the record's head itself (no copy), not marked a view: an
    # in-place ReLU on the pooled output writes into the record's maxima, which nothing
    # reads again; the gradient still goes through the offsets, eagerly and compiled.
    x = pool_input("normal", np.float32)[:2, :3]
    geo = ((2, 2), (2, 2), (0, 0), (1, 1))
    rec = O.MAX_POOL2D_WITH_OFFSETS.run(np, x, *geo)
    v = O._values_impl(np, rec, x, *geo)
    assert np.shares_memory(v, rec) and v.shape == rec.shape[1:]
    x = x - x.mean()

    def f(t):
        y = tj.nn.functional.max_pool2d(t, 2)
        return (y.relu_() * y).sum()

    fn = tj.script(f) if compiled else f
    xs = [tj.tensor(x.copy(), requires_grad=True) for _ in range(2)]
    for t in xs:   # twice: a compiled function's second call runs its plan
        loss = fn(t)
        loss.backward()
    pooled = P.MAX_POOL2D.run(np, x, *geo)
    want_loss = float((np.maximum(pooled, 0).astype(np.float64) ** 2).sum())
    assert abs(float(loss.item()) - want_loss) < 1e-3 * max(1.0, want_loss)
    g_pooled = 2 * np.maximum(pooled, 0)
    want = first_max_grad(g_pooled.astype(np.float32), x, *geo)
    assert np.abs(want).max() > 0.1
    for t in xs:
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [16, 17])
def test_bf16_windows_past_its_exact_offsets_send_the_gradient_to_the_maximum(k):
    """bf16 holds integers exactly to 256 only: a window of more positions must not keep
    its offsets in a bf16 record (offset 287 would read as 288)."""
    x = np.zeros((1, 2, k, k), np.float32)
    x[0, 0, k - 1, k - 2] = 5.0
    x[0, 1, k - 2, k - 1] = -0.5
    x[0, 1, :k - 2] = -1.0
    t = tj.tensor(x).bfloat16().requires_grad_()
    y = tj.nn.functional.max_pool2d(t, k)
    y.float().sum().backward()
    g = t.grad.float().numpy()
    assert np.argwhere(g[0, 0]).tolist() == [[k - 1, k - 2]] and g[0, 0, k - 1, k - 2] == 1.0
    assert float(y.detach().float().numpy()[0, 0, 0, 0]) == 5.0 and g[0, 1].sum() == 1.0
