"""The blocked convolution kernels (compiler/cpu/kernels/conv_blocks.py) against PyTorch
over odd geometries: strides that do and do not divide the window, dilation, padding up to
and past the window's reach, 1x1 windows with a stride (output phases no window offset
reaches), a batch of one, a gradient in channel-major memory, and blocks of one image; the input gradient in both its forms (a forward convolution of the
gradient, col2im of W^T g); wide column strides run over the input's phases."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import conv_blocks as B

# (N, C, H, W, O, kernel, stride, padding, dilation)
GEOMETRIES = [
    (2, 3, 9, 8, 4, (3, 3), (1, 1), (1, 1), (1, 1)),
    (3, 4, 10, 10, 5, (4, 4), (2, 2), (1, 1), (1, 1)),
    (1, 2, 11, 10, 3, (3, 2), (3, 2), (2, 0), (2, 3)),
    (2, 5, 7, 9, 3, (1, 1), (2, 2), (0, 0), (1, 1)),
    (1, 2, 5, 6, 2, (3, 3), (2, 3), (0, 2), (1, 1)),
    (2, 3, 6, 7, 4, (2, 3), (1, 1), (3, 4), (1, 2)),
    (1, 6, 4, 4, 7, (4, 4), (1, 1), (0, 0), (1, 1)),
    (2, 2, 13, 5, 3, (5, 1), (3, 1), (2, 0), (1, 1)),
    # strided rows of 8 to 16 columns (im2col's table form) and just past them (its rows form)
    (2, 3, 12, 33, 4, (4, 4), (2, 2), (1, 1), (1, 1)),
    (1, 2, 14, 40, 3, (3, 3), (1, 3), (2, 1), (1, 2)),
    (2, 2, 7, 36, 3, (3, 3), (2, 2), (1, 1), (1, 1)),
    # column strides of 4 or more over long rows: run over the input's phases, a stride
    # that divides the window, one wider than it, and one that does neither (not split)
    (2, 1, 1, 200, 4, (1, 16), (1, 4), (0, 3), (1, 1)),
    (1, 2, 6, 90, 3, (2, 3), (2, 4), (1, 2), (1, 1)),
    (2, 3, 5, 100, 2, (1, 8), (1, 4), (0, 1), (1, 1)),
    (1, 2, 3, 120, 3, (1, 6), (1, 4), (0, 0), (1, 1)),
    # unit stride, no more output than input channels: the input gradient as a forward
    # convolution of the gradient (padding within the window's reach), and past the reach
    (2, 5, 9, 8, 3, (3, 3), (1, 1), (1, 1), (1, 1)),
    (1, 4, 10, 9, 2, (3, 2), (1, 1), (2, 1), (2, 3)),
    (2, 4, 6, 9, 4, (2, 3), (1, 1), (1, 0), (1, 1)),
    (3, 3, 12, 20, 3, (3, 3), (1, 1), (0, 2), (1, 1)),
    (1, 4, 7, 7, 4, (3, 3), (1, 1), (3, 3), (1, 1)),
    # 1x1 over short images: one product over the batch's channel-major rows (a view at
    # one position, a squeeze-and-excitation layer's), past them a product per image
    (3, 6, 1, 1, 5, (1, 1), (1, 1), (0, 0), (1, 1)),
    (4, 5, 2, 3, 7, (1, 1), (1, 1), (0, 0), (1, 1)),
    (2, 3, 4, 4, 4, (1, 1), (1, 1), (0, 0), (1, 1)),
    (2, 3, 7, 7, 4, (1, 1), (1, 1), (0, 0), (1, 1)),
    (2, 3, 8, 9, 4, (1, 1), (1, 1), (0, 0), (1, 1)),
]


def test_several_images_a_block_each_land_in_their_rows(monkeypatch):
    """A block of several images of 64 positions each, multiplied at once and copied into
    their NCHW rows, and a last block of one image multiplied straight into its rows."""
    torch = pytest.importorskip("torch")
    n, c, o = 5, 6, 7
    geo = dict(kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    # two images' columns a block: blocks of 2, 2 and 1 images
    monkeypatch.setattr(B, "_BLOCK_BYTES", 2 * c * 9 * 64 * 8)
    rng = np.random.default_rng(3)
    x, wt, b = rng.standard_normal((n, c, 8, 8)), rng.standard_normal((o, c, 3, 3)), rng.standard_normal(o)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), 1, 1).numpy()
    np.testing.assert_allclose(B.forward(x, wt, b, **geo), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("channel_major", [False, True])
@pytest.mark.parametrize("block", [1 << 19, 1])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_input_gradient_matches_torch(monkeypatch, geo, block, channel_major):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(B, "_BLOCK_BYTES", block)
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 0)   # (blocks of `block` bytes alone)
    n, c, h, w, o, k, s, p, d = geo
    rng = np.random.default_rng(sum(geo[:5]))
    wt = rng.standard_normal((o, c) + k)
    oh, ow = (B._out_hw(h, w, k, s, p, d))
    g = rng.standard_normal((n, o, oh, ow))
    ref = torch.nn.grad.conv2d_input((n, c, h, w), torch.tensor(wt), torch.tensor(g), s, p, d).numpy()
    if channel_major:
        g = np.ascontiguousarray(g.swapaxes(0, 1)).swapaxes(0, 1)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        dx = B.xgrad(g.astype(dtype), wt.astype(dtype), (h, w), k, s, p, d)
        assert dx.shape == ref.shape and dx.dtype == dtype and dx.flags.c_contiguous
        np.testing.assert_allclose(dx, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("block", [1 << 19, 1])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_forward_and_weight_gradient_match_torch(monkeypatch, geo, block):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(B, "_BLOCK_BYTES", block)
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 0)   # (blocks of `block` bytes alone)
    n, c, h, w, o, k, s, p, d = geo
    rng = np.random.default_rng(sum(geo[:5]) + 1)
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k), rng.standard_normal(o)
    y = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), s, p, d).numpy()
    g = rng.standard_normal(y.shape)
    dw = torch.nn.grad.conv2d_weight(torch.tensor(x), wt.shape, torch.tensor(g), s, p, d).numpy()
    geom = dict(kernel=k, stride=s, padding=p, dilation=d)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-4)):
        xd, gd = x.astype(dtype), g.astype(dtype)
        got = B.forward(xd, wt.astype(dtype), b.astype(dtype), **geom)
        assert got.dtype == dtype and got.flags.c_contiguous
        np.testing.assert_allclose(got, y, rtol=tol, atol=tol)
        np.testing.assert_allclose(B.wgrad(gd, xd, **geom), dw, rtol=tol, atol=tol)
        rec = B.wgrad(gd, xd, bias=True, **geom)
        np.testing.assert_allclose(rec[:-o].reshape(dw.shape), dw, rtol=tol, atol=tol)
        np.testing.assert_allclose(rec[-o:], g.sum((0, 2, 3)), rtol=tol, atol=tol)


@pytest.mark.parametrize("geo, forward_form", [
    ((2, 5, 9, 8, 3, (3, 3), (1, 1), (1, 1), (1, 1)), True),
    ((1, 4, 10, 9, 2, (3, 2), (1, 1), (2, 1), (2, 3)), True),
    ((1, 4, 7, 7, 4, (3, 3), (1, 1), (3, 3), (1, 1)), False),    # padding past the window's reach
    ((2, 3, 9, 8, 4, (3, 3), (1, 1), (1, 1), (1, 1)), False),    # more output than input channels
    ((1, 6, 4, 4, 5, (3, 3), (1, 1), (1, 1), (1, 1)), False),    # rows of im2col's table form
    ((1, 5, 9, 9, 3, (3, 3), (2, 2), (1, 1), (1, 1)), False),    # a stride
])
def test_input_gradient_forms_agree(monkeypatch, geo, forward_form):
    """The input gradient as a forward convolution of the gradient equals the col2im form's."""
    n, c, h, w, o, k, s, p, d = geo
    oh, ow = B._out_hw(h, w, k, s, p, d)
    assert B._as_forward(o, c, w, k, s, p, d) is forward_form
    rng = np.random.default_rng(7)
    g, wt = rng.standard_normal((n, o, oh, ow)), rng.standard_normal((o, c) + k)
    got = B.xgrad(g, wt, (h, w), k, s, p, d)
    monkeypatch.setattr(B, "_as_forward", lambda *a: False)
    np.testing.assert_allclose(got, B.xgrad(g, wt, (h, w), k, s, p, d), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("geo", [
    (3, 16, 1, 70, 12, (1, 2), (1, 1), (0, 4), (1, 4)),  # a dilated causal Conv1d: a block's images in one GEMM
    (2, 4, 1, 40, 6, (1, 1), (1, 1), (0, 0), (1, 1)),    # 1x1: the images' own rows
    (3, 3, 6, 7, 4, (3, 3), (2, 2), (1, 1), (1, 1)),     # short rows: the block's GEMM copied into place
    (2, 6, 9, 8, 7, (3, 3), (1, 1), (1, 1), (1, 1)),     # the input gradient by col2im
])
@pytest.mark.parametrize("block", [1 << 19, 1])
def test_products_on_the_gemm_template_match_torch(monkeypatch, geo, block):
    """Where the measured choice makes a block's products the GEMM template's (strided
    column views, outputs written in place, batched 1x1 weight gradients), the results
    are PyTorch's."""
    torch = pytest.importorskip("torch")
    from tracejit.compiler.cpu.gemm import choice, products, template
    cfg = template.CONFIGS[0]
    if not template.kernel_for("float32", cfg).load_now():
        pytest.skip("the GEMM template's kernel does not compile here")
    runs = []
    run = template.run
    monkeypatch.setattr(template, "run", lambda *a, **kw: runs.append(1) or run(*a, **kw))
    monkeypatch.setattr(products, "INTO_MIN_MNK", 0)
    monkeypatch.setattr(products, "_eligible", lambda a, b: a.dtype == b.dtype == np.float32)
    monkeypatch.setattr(choice, "choose", lambda key: cfg)
    monkeypatch.setattr(B, "_BLOCK_BYTES", block)
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 0)   # (blocks of `block` bytes alone)
    n, c, h, w, o, k, s, p, d = geo
    rng = np.random.default_rng(sum(geo[:5]) + 2)
    x, wt, b = (rng.standard_normal(sh).astype(np.float32) for sh in ((n, c, h, w), (o, c) + k, (o,)))
    tx, tw = torch.tensor(x), torch.tensor(wt)
    y = torch.nn.functional.conv2d(tx, tw, torch.tensor(b), s, p, d).numpy()
    g = rng.standard_normal(y.shape).astype(np.float32)
    tg = torch.tensor(g)
    geom = dict(kernel=k, stride=s, padding=p, dilation=d)
    np.testing.assert_allclose(B.forward(x, wt, b, **geom), y, rtol=1e-4, atol=1e-4)
    assert runs, "the forward's products did not run on the template"
    runs.clear()
    rec = B.wgrad(g, x, bias=True, **geom)
    dw = torch.nn.grad.conv2d_weight(tx, wt.shape, tg, s, p, d).numpy()
    np.testing.assert_allclose(rec[:-o].reshape(dw.shape), dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rec[-o:], g.sum((0, 2, 3)), rtol=1e-4, atol=1e-4)
    assert runs, "the weight gradient's products did not run on the template"
    runs.clear()
    dx = torch.nn.grad.conv2d_input(x.shape, tw, tg, s, p, d).numpy()
    np.testing.assert_allclose(B.xgrad(g, wt, (h, w), **geom), dx, rtol=1e-4, atol=1e-4)
    assert runs, "the input gradient's products did not run on the template"


def test_block_images_amortise_the_python_of_a_block(monkeypatch):
    """A block holds the images whose columns fit `_BLOCK_BYTES`, more where those would do
    fewer than `_BLOCK_MIN_WORK` multiply-adds (up to `_BLOCK_MAX_BYTES` of columns), and
    never more than an even share of the batch over the CPUs."""
    monkeypatch.setattr(B, "_BLOCK_BYTES", 1000)
    monkeypatch.setattr(B, "_BLOCK_MAX_BYTES", 4000)
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 800)
    assert B.block_images(32, 100, 32 * 1000, cpus=1) == 10     # columns fit: 10 images
    assert B.block_images(32, 500, 32 * 100, cpus=1) == 8       # 8 images make the work
    assert B.block_images(32, 1000, 32 * 10, cpus=1) == 4       # capped by the bytes
    assert B.block_images(32, 500, 32 * 100, cpus=8) == 4       # a block per CPU at least
    assert B.block_images(3, 5000, 3, cpus=1) == 1              # one image past both limits
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 0)
    assert B.block_images(32, 500, 32 * 100, cpus=1) == 2


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_results_do_not_depend_on_the_thread_count(monkeypatch, threads):
    """Split over 1, 2 or 4 threads (the blocks then differ too), the forward, the input
    gradient and the weight gradient (summed per thread, then over the threads) agree to
    rounding. Not to the bit: each output element is one product's dot, but the BLAS's
    kernels for a block's edge tiles may sum it in another order (OpenBLAS on an AMX Xeon:
    93 of 9600 float64 elements a last bit apart at 4 threads)."""
    from tracejit.compiler.cpu.runtime import coreshare, sharepool
    rng = np.random.default_rng(3)
    n, c, h, o, k = 12, 6, 10, 8, (3, 3)
    x, wt = rng.standard_normal((n, c, h, h)), rng.standard_normal((o, c) + k)
    g = rng.standard_normal((n, o, h, h))
    geom = dict(kernel=k, stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    monkeypatch.setattr(B, "_BLOCK_MIN_WORK", 1 << 14)
    monkeypatch.setattr(sharepool, "SPLIT_MIN_WORK", 0)
    monkeypatch.setattr(coreshare.core_share, "cpus", 1)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 1)
    ref = B.forward(x, wt, **geom), B.xgrad(g, wt, (h, h), **geom), B.wgrad(g, x, **geom)
    monkeypatch.setattr(coreshare.core_share, "cpus", threads)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: threads)
    got = B.forward(x, wt, **geom), B.xgrad(g, wt, (h, h), **geom), B.wgrad(g, x, **geom)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-12, atol=1e-12)


def test_wide_column_strides_over_long_rows_run_over_the_input_phases():
    """The phases rule: (phases kept, taps per phase) per dim where the column stride is 4
    or more over rows past im2col's table form and divides the window or exceeds it."""
    one = (1, 1)
    assert B._phases((1, 80), (1, 16), one, 496) == ((1, 1), (16, 5))
    assert B._phases((2, 3), (2, 4), one, 23) == ((2, 1), (3, 1))
    assert B._phases((1, 6), (1, 4), one, 100) is None        # 6 taps at stride 4: waste
    assert B._phases((4, 4), (2, 2), one, 100) is None        # stride 2: gathers pay
    assert B._phases((1, 16), (1, 4), one, 12) is None        # short rows: the table form
    assert B._phases((1, 16), (1, 4), (1, 2), 48) is None     # dilated


# (N, C, H, W, O, kernel, padding): signatures a plan binds once (`forward_call`, `xgrad_call`
# by the direct kernel, `wgrad_call` as one block): NTM's circular shift (a 3-tap conv1d of
# one row), padding, several images and channels
BOUND = [
    (1, 1, 1, 130, 1, (1, 3), (0, 0)),
    (1, 3, 4, 70, 2, (3, 3), (1, 1)),
    (2, 2, 3, 66, 2, (2, 3), (0, 1)),
]


@pytest.mark.parametrize("geo", BOUND)
def test_calls_bound_to_a_signature_match_torch(geo, monkeypatch):
    """The calls a plan makes for one signature (ops/impls.py `specialized`) take the
    route they were bound to and equal PyTorch's forward and gradients, bias included; a
    channel-major input and a strided weight are read as they are (one core: every
    batch is one block of `wgrad_call`, whatever the machine's count)."""
    torch = pytest.importorskip("torch")
    from tracejit.ops import impls
    from tracejit.ops.conv_gemm import CONV2D_GEMM, CONV2D_WGRAD, CONV2D_XGRAD
    n, c, h, w, o, k, p = geo
    rng = np.random.default_rng(sum(geo[:5]))
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k), rng.standard_normal(o)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, wt, b))
    ref = torch.nn.functional.conv2d(tx, tw, tb, 1, p)
    g = rng.standard_normal(tuple(ref.shape))
    ref.backward(torch.tensor(g))
    geom = dict(kernel=k, stride=(1, 1), padding=p, dilation=(1, 1))
    dt = np.dtype(np.float64)
    fwd = impls.specialized(CONV2D_GEMM, (x.shape, wt.shape, b.shape), dt, geom)
    xg = impls.specialized(CONV2D_XGRAD, (g.shape, wt.shape), dt, dict(geom, input_hw=(h, w)))
    monkeypatch.setattr(B._coreshare.core_share, "cpus", 1)
    wg = impls.specialized(CONV2D_WGRAD, (g.shape, x.shape), dt, dict(geom, bias=True))
    assert None not in (fwd, xg, wg)
    xcm = np.ascontiguousarray(x.swapaxes(0, 1)).swapaxes(0, 1)     # (C, N, H, W) memory
    wst = np.asfortranarray(wt)
    for xin, win in ((x, wt), (xcm, wst)):
        np.testing.assert_allclose(fwd(xin, win, b), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xg(g, win), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
        rec = wg(g, xin)
        np.testing.assert_allclose(rec[:-o].reshape(wt.shape), tw.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(rec[-o:], tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_signatures_of_other_routes_keep_the_table():
    """Signatures the bound calls do not take (more output channels than the direct kernel's,
    short rows, groups, a 1x1 window) leave the plan to the table's per-call route."""
    from tracejit.ops import impls
    from tracejit.ops.conv_gemm import CONV2D_GEMM, CONV2D_XGRAD
    geom = dict(kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    dt = np.dtype(np.float32)
    assert impls.specialized(CONV2D_GEMM, ((1, 4, 8, 80), (16, 4, 3, 3)), dt, geom) is None
    assert impls.specialized(CONV2D_GEMM, ((1, 4, 8, 20), (4, 4, 3, 3)), dt, geom) is None
    assert impls.specialized(CONV2D_GEMM, ((1, 4, 8, 80), (4, 2, 3, 3)), dt, dict(geom, groups=2)) is None
    one = dict(kernel=(1, 1), stride=(1, 1), padding=(0, 0), dilation=(1, 1))
    assert impls.specialized(CONV2D_GEMM, ((1, 4, 8, 80), (4, 4, 1, 1)), dt, one) is None
    assert impls.specialized(CONV2D_XGRAD, ((1, 8, 8, 80), (8, 4, 3, 3)), dt, dict(geom, input_hw=(8, 80))) is None


@pytest.mark.parametrize("op", ["forward", "wgrad", "xgrad"])
def test_a_batch_of_one_splits_its_columns_over_channels_bit_for_bit(op):
    # A batch of one is one block: its im2col (col2im) runs over channel ranges on the
    # cores, and any cut of the channels gives the same bits (no core count assumed).
    pytest.importorskip("numba")
    from inputs import same_bits_under_uneven_split
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 5, 12, 40)).astype(np.float32)
    w = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    g = rng.standard_normal((1, 4, 6, 20)).astype(np.float32)
    geo = dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1))
    run = {"forward": lambda: (B.forward(x, w, **geo),), "wgrad": lambda: (B.wgrad(g, x, **geo),),
           "xgrad": lambda: (B.xgrad(g, w, (12, 40), **geo),)}[op]
    assert run()[0] is not None
    same_bits_under_uneven_split(run, lambda n: [(0, 2), (2, 2), (2, 3), (3, n)], calls=1)
