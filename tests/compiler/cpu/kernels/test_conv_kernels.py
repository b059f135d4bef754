"""im2col's phases form (compiler/cpu/kernels/conv_kernels.py) for column-strided windows:
the numpy form's columns bit for bit (pad value, NaN and -0.0 included) over strides that
do and do not divide the window, dilation, padding past the window's reach, a row stride
wider than the window (rows no window reads), phases no window column reads, images a
window row or column wide, and any channel range; the form chosen by row length and
window width alone; a convolution and its gradients through it against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import conv_kernels as K
from tracejit.ops import conv as C

# (kernel, stride, padding, dilation, (h, w)), each taking the phases form
PHASES_GEOMETRIES = [((3, 3), (2, 2), (1, 1), (1, 1), (9, 66)),       # ResNet's downsampling 3x3
                     ((7, 7), (2, 2), (3, 3), (1, 1), (12, 30)),      # a stem
                     ((3, 3), (2, 2), (0, 0), (1, 1), (7, 65)),       # no padding, odd width
                     ((4, 4), (2, 2), (1, 1), (1, 1), (6, 64)),       # the stride divides the window
                     ((5, 5), (3, 3), (2, 2), (1, 1), (11, 61)),
                     ((3, 3), (2, 2), (2, 2), (2, 2), (8, 70)),       # dilated: phase (2j) % 2 alone
                     ((3, 5), (2, 3), (4, 7), (1, 1), (5, 70)),       # padding past the window's reach
                     ((1, 1), (2, 2), (0, 0), (1, 1), (5, 199)),      # one phase, every other row read
                     ((1, 3), (3, 2), (0, 1), (1, 1), (8, 70)),       # row stride wider than the window
                     ((2, 7), (1, 2), (0, 3), (1, 1), (2, 30)),       # unit row stride, one output row
                     ((2, 12), (1, 5), (0, 13), (1, 1), (3, 40))]     # windows mostly in the padding


def _columns(x, geo, pad_value, c0=0, c1=None):
    kernel, stride, padding, dilation, _ = geo
    oh = C.conv_out_size(x.shape[2], kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(x.shape[3], kernel[1], stride[1], padding[1], dilation[1])
    fn = K.im2col_kernel(x.dtype.name, kernel, stride, padding, dilation, ow)
    assert fn is not None
    cols = np.full((x.shape[1] * kernel[0] * kernel[1], x.shape[0] * oh * ow), 7.0, x.dtype)
    fn(x, cols, oh, ow, float(pad_value), c0, x.shape[1] if c1 is None else c1, *kernel)
    return cols, ow


@pytest.fixture(autouse=True)
def _kernels_load_now(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")


def _loaded(geo, dtype):
    """Waits until the phases kernel for `geo` is loaded (compiled in the background)."""
    from tracejit.compiler.cpu.kernels.vectorized import settle
    kernel, stride, padding, dilation, (h, w) = geo
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    for _ in range(600):
        if K.im2col_kernel(np.dtype(dtype).name, kernel, stride, padding, dilation, ow) is not None:
            return
        settle()
    pytest.fail(f"the im2col kernel for {geo} did not load")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", PHASES_GEOMETRIES)
def test_phases_form_copies_the_numpy_forms_bits(dtype, geo):
    kernel, stride, padding, dilation, (h, w) = geo
    _loaded(geo, dtype)
    x = np.random.default_rng(3).standard_normal((2, 3, h, w)).astype(dtype)
    x[0, 1, 0, 0] = np.nan
    x[1, 2, -1, -1] = -0.0
    cols, ow = _columns(x, geo, -2.5)
    assert K.im2col_form(kernel, stride, ow) == "phases"
    want = C._unfold_impl(np, x, kernel, stride, padding, dilation, -2.5, layout="gemm")
    np.testing.assert_array_equal(cols, want)
    assert np.array_equal(np.signbit(cols), np.signbit(want))


def test_phases_form_writes_only_its_channel_range():
    geo = PHASES_GEOMETRIES[0]
    _loaded(geo, np.float32)
    x = np.random.default_rng(4).standard_normal((2, 5, 9, 66)).astype(np.float32)
    cols, _ = _columns(x, geo, 0.0, 1, 3)
    want = C._unfold_impl(np, x, *geo[:4], 0.0, layout="gemm")
    rows = 9    # kh * kw column rows a channel
    np.testing.assert_array_equal(cols[rows:3 * rows], want[rows:3 * rows])
    assert (cols[:rows] == 7.0).all() and (cols[3 * rows:] == 7.0).all()


@pytest.mark.parametrize("kernel, stride, ow, form", [
    ((3, 3), (2, 2), 28, "table"), ((3, 3), (2, 2), 32, "phases"), ((7, 7), (2, 2), 14, "phases"),
    ((7, 7), (2, 2), 13, "table"), ((7, 7), (2, 2), 7, "table"), ((1, 1), (2, 2), 56, "table"),
    ((1, 1), (2, 2), 96, "phases"), ((3, 3), (1, 1), 56, "runs"), ((3, 3), (2, 1), 56, "runs"),
    ((3, 3), (1, 1), 4, "table"), ((3, 3), (1, 2), 20, "table")])
def test_the_form_follows_row_length_and_window_width(kernel, stride, ow, form):
    assert K.im2col_form(kernel, stride, ow) == form


@pytest.mark.parametrize("kernel, stride, ow, form", [
    ((3, 3), (2, 2), 16, "phases"), ((3, 3), (2, 2), 15, "unrolled"), ((1, 1), (1, 2), 40, "phases"),
    ((3, 3), (2, 1), 40, "rows"), ((3, 3), (1, 1), 16, "rows"), ((9, 9), (2, 2), 4, "phases"),
    ((9, 9), (1, 1), 4, "rows")])
def test_the_col2im_form_follows_row_length_and_stride(kernel, stride, ow, form):
    assert K.col2im_form(kernel, stride, ow) == form


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", [dict(stride=2, padding=1), dict(stride=(2, 3), padding=(0, 2), dilation=(1, 2))])
def test_conv2d_over_phases_matches_torch(dtype, cfg):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 10, 100)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    tx, tw, tb = (tj.tensor(v, requires_grad=True) for v in (x, w, b))
    px, pw, pb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    want = torch.nn.functional.conv2d(px, pw, pb, **cfg)
    ow = want.shape[3]
    assert K.im2col_form((3, 3), (cfg["stride"],) * 2 if isinstance(cfg["stride"], int) else cfg["stride"],
                         ow) == "phases"
    _loaded(((3, 3), (2, 2) if cfg["stride"] == 2 else cfg["stride"],
             (1, 1) if cfg["padding"] == 1 else cfg["padding"], cfg.get("dilation", (1, 1)), (10, 100)), dtype)
    out = tj.nn.functional.conv2d(tx, tw, tb, **cfg)
    g = rng.standard_normal(tuple(want.shape)).astype(dtype)
    out.backward(tj.tensor(g))
    want.backward(torch.tensor(g))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    for mine, ref in ((tx, px), (tw, pw), (tb, pb)):
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=tol, atol=tol)


def _col2im_loaded(geo, dtype):
    from tracejit.compiler.cpu.kernels.vectorized import settle
    kernel, stride, padding, dilation, (h, w) = geo
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    for _ in range(600):
        fn, zeroes = K.col2im_kernel(np.dtype(dtype).name, kernel, stride, padding, dilation, ow)
        if fn is not None:
            return fn, zeroes
        settle()
    pytest.fail(f"the col2im kernel for {geo} did not load")


# PHASES_GEOMETRIES with output rows of 16 columns or more (the phases form's rule)
COL2IM_GEOMETRIES = [g[:4] + ((g[4][0], max(g[4][1], 2 * 16 * g[1][1])),) for g in PHASES_GEOMETRIES] + [
    ((4, 4), (2, 2), (1, 1), (1, 1), (34, 36)), ((3, 2), (1, 2), (0, 3), (2, 1), (17, 37))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", COL2IM_GEOMETRIES)
def test_col2im_phases_form_gives_the_numpy_forms_bits(dtype, geo):
    # Each element's sum runs in the window's (i, j) order from zero, as numpy's fold: the
    # same bits; the image is written whole (it starts as garbage), zeros where no window reads.
    kernel, stride, padding, dilation, (h, w) = geo
    fn, zeroes = _col2im_loaded(geo, dtype)
    oh = C.conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    assert zeroes and K.col2im_form(kernel, stride, ow) == "phases"
    cols = np.random.default_rng(5).standard_normal((3 * kernel[0] * kernel[1], 2 * oh * ow)).astype(dtype)
    img = np.full((2, 3, h, w), np.nan, dtype)
    fn(cols, img, oh, ow, 0, 3, *kernel)
    want = C._fold_impl(np, cols, (h, w), kernel, stride, padding, dilation, "gemm")
    np.testing.assert_array_equal(img, want)


def test_col2im_phases_form_writes_only_its_channel_range():
    geo = COL2IM_GEOMETRIES[1]
    fn, _ = _col2im_loaded(geo, np.float32)
    kernel, stride, padding, dilation, (h, w) = geo
    oh = C.conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    cols = np.random.default_rng(6).standard_normal((4 * 49, 2 * oh * ow)).astype(np.float32)
    img = np.full((2, 4, h, w), 7.0, np.float32)
    fn(cols, img, oh, ow, 1, 3, *kernel)
    want = C._fold_impl(np, cols, (h, w), kernel, stride, padding, dilation, "gemm")
    np.testing.assert_array_equal(img[:, 1:3], want[:, 1:3])
    assert (img[:, 0] == 7.0).all() and (img[:, 3] == 7.0).all()
