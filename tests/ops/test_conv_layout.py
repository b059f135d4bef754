"""unfold/fold in the GEMM layout (C*kh*kw, N*L) that conv2d uses (ops/conv.py).

The "gemm" columns are the "batch" ones (PyTorch's F.unfold layout) transposed; fold in
either layout is unfold's adjoint; the numba im2col and col2im kernels (conv_blocks.py's
columns) equal the numpy forms (within float rounding where they add in another order).
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError
from tracejit.compiler.cpu.kernels import conv_kernels as K
from tracejit.compiler.cpu.runtime import sharepool
from tracejit.ops import conv as C

GEOMETRIES = [((3, 3), (1, 1), (0, 0), (1, 1)),
              ((3, 2), (2, 1), (1, 1), (1, 2)),
              ((2, 2), (2, 2), (1, 0), (1, 1))]


def _im2col_native(x, kernel, stride, padding, dilation, pad_value, oh, ow):
    """"gemm" columns of `x` by the im2col kernel, split by input channel over the cores."""
    fn = K.im2col_kernel(x.dtype.name, kernel, stride, padding, dilation, ow)
    assert fn is not None
    n, c = x.shape[:2]
    cols = np.empty((c * kernel[0] * kernel[1], n * oh * ow), dtype=x.dtype)
    xc = np.ascontiguousarray(x)
    sharepool.split(lambda c0, c1: fn(xc, cols, oh, ow, float(pad_value), c0, c1, *kernel), c, cols.size)
    return cols


def _col2im_native(cols, n, c, output_size, kernel, stride, padding, dilation):
    """fold of "gemm" columns by the col2im kernel, split by input channel over the cores."""
    (h, w), ow = output_size, C.conv_out_size(output_size[1], kernel[1], stride[1], padding[1], dilation[1])
    oh = C.conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    fn, rows = K.col2im_kernel(cols.dtype.name, kernel, stride, padding, dilation, ow)
    assert fn is not None
    cc = np.ascontiguousarray(cols)
    img = (np.empty if rows else np.zeros)((n, c, h, w), dtype=cols.dtype)   # (rows: the kernel zeroes)
    extra = tuple(kernel) if rows else ()
    sharepool.split(lambda c0, c1: fn(cc, img, oh, ow, c0, c1, *extra), c, cols.size)
    return img


def _gemm_from_batch(cols_b, n, ckk):
    # (N, CKK, L) -> (CKK, N*L)
    return np.ascontiguousarray(cols_b.transpose(1, 0, 2)).reshape(ckk, -1)


@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("channel_major", [False, True])
def test_unfold_gemm_is_batch_transposed(geo, channel_major):
    kernel, stride, padding, dilation = geo
    x = np.random.default_rng(0).standard_normal((3, 4, 9, 8)).astype(np.float32)
    if channel_major:
        x = np.ascontiguousarray(x.swapaxes(0, 1)).swapaxes(0, 1)
    b = C.unfold(tj.tensor(x), kernel, stride, padding, dilation).numpy()
    g = C.unfold(tj.tensor(x), kernel, stride, padding, dilation, layout="gemm").numpy()
    np.testing.assert_array_equal(g, _gemm_from_batch(b, 3, b.shape[1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_fold_gemm_matches_batch_and_numpy_form(monkeypatch, dtype, geo):
    kernel, stride, padding, dilation = geo
    h, w = 9, 8
    oh = C.conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    ckk = 4 * kernel[0] * kernel[1]
    cols_b = np.random.default_rng(1).standard_normal((3, ckk, oh * ow)).astype(dtype)
    ref = C.fold(tj.tensor(cols_b), (h, w), kernel, stride, padding, dilation).numpy()
    cols_g = _gemm_from_batch(cols_b, 3, ckk)
    got = C.fold(tj.tensor(cols_g), (h, w), kernel, stride, padding, dilation, layout="gemm").numpy()
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(_col2im_native(cols_g, 3, 4, (h, w), kernel, stride, padding, dilation), got,
                               rtol=tol, atol=tol)


def test_col2im_kernel_ran():
    pytest.importorskip("numba")
    cols = np.ones((9, 2 * 4), np.float32)
    img = _col2im_native(cols, 2, 1, (4, 4), (3, 3), (1, 1), (0, 0), (1, 1))
    assert img.shape == (2, 1, 4, 4) and img.flags.c_contiguous
    assert img[0, 0, 1, 1] == 4.0 and img[0, 0, 0, 0] == 1.0   # overlaps add


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("pad_value", [0.0, -np.inf])
def test_unfold_gemm_kernel_matches_numpy_form(monkeypatch, dtype, geo, pad_value):
    kernel, stride, padding, dilation = geo
    x = np.random.default_rng(2).standard_normal((3, 4, 9, 8)).astype(dtype)
    x = np.ascontiguousarray(x.swapaxes(0, 1)).swapaxes(0, 1)   # channel-major, as conv outputs
    oh = C.conv_out_size(9, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(8, kernel[1], stride[1], padding[1], dilation[1])
    got = _im2col_native(x, kernel, stride, padding, dilation, pad_value, oh, ow)
    want = C.unfold(tj.tensor(x), kernel, stride, padding, dilation, pad_value, layout="gemm").numpy()
    assert got.dtype == want.dtype and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


def test_im2col_kernel_ran():
    pytest.importorskip("numba")
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4)
    cols = _im2col_native(x, (3, 3), (1, 1), (1, 1), (1, 1), -5.0, 4, 4)
    assert cols.shape == (9, 2 * 16)
    # row (i=0, j=0) of output (b=0, oy=0, ox=0) is the padding; (i=1, j=1) is x itself
    assert cols[0, 0] == -5.0 and cols[4, 16 + 5] == x[1, 0, 1, 1]
    np.testing.assert_array_equal(cols[4].reshape(2, 4, 4), x[:, 0])


def test_fold_unfold_gemm_are_adjoint_under_autograd():
    x = tj.randn(2, 3, 6, 5, requires_grad=True)
    cols = C.unfold(x, (3, 2), 1, 1, 1, layout="gemm")
    g = tj.randn(*cols.shape)
    (cols * g).sum().backward()
    expect = C.fold(g, (6, 5), (3, 2), 1, 1, 1, layout="gemm")
    np.testing.assert_allclose(x.grad.numpy(), expect.numpy(), rtol=1e-5, atol=1e-6)


def test_layout_errors():
    with pytest.raises(ValueError, match="layout must be one of"):
        C.unfold(tj.randn(1, 1, 4, 4), 2, layout="nchw")
    with pytest.raises(ShapeError, match="'gemm' layout should be"):
        C.fold(tj.randn(9, 7), (4, 4), 3, layout="gemm")


@pytest.mark.parametrize("geo", GEOMETRIES)
def test_im2col_and_col2im_split_over_channels_give_the_same_bits(geo):
    """The kernels run channel ranges so that sharepool.split can share a call over the
    cores: any cut of the channels gives the bits of one whole call."""
    pytest.importorskip("numba")
    from inputs import same_bits_under_uneven_split
    kernel, stride, padding, dilation = geo
    x = np.random.default_rng(4).standard_normal((3, 5, 9, 8)).astype(np.float32)
    oh = C.conv_out_size(9, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(8, kernel[1], stride[1], padding[1], dilation[1])

    def run():
        cols = _im2col_native(x, kernel, stride, padding, dilation, 0.0, oh, ow)
        return cols, _col2im_native(cols, 3, 5, (9, 8), kernel, stride, padding, dilation)
    same_bits_under_uneven_split(run, lambda n: [(0, 2), (2, 2), (2, 3), (3, n)], calls=2)


def _row_pitch_cases():
    """(geometry, channels per block) pairs whose block's scratch fits in one channel's
    column rows (kernel[0] * OH rows against the padded input's H: the form needs that)."""
    geos = [((3, 3), (1, 1), (0, 0), (1, 1)), ((3, 2), (1, 2), (1, 0), (2, 1)),
            ((2, 3), (1, 1), (1, 2), (3, 2)), ((1, 3), (1, 3), (0, 1), (1, 1))]
    cases = []
    for kernel, stride, padding, dilation in geos:
        oh = C.conv_out_size(9, kernel[0], stride[0], padding[0], dilation[0])
        fits = kernel[0] * oh // (9 + 2 * padding[0])
        cases += [((kernel, stride, padding, dilation), k) for k in (1, 2) if k <= fits]
    return cases


@pytest.mark.parametrize("geo,per_block", _row_pitch_cases())
@pytest.mark.parametrize("channel_major", [False, True])
def test_unfold_gemm_numpy_form_by_row_pitch_equals_the_strided_copy(monkeypatch, geo, per_block,
                                                                      channel_major):
    # Rows cut to the windows' width first, by blocks of 1 or 2 of 5 channels (the last
    # block shorter), in the last channel's rows: the same columns, bit for bit, as the one
    # strided copy (stride[0] > 1 takes that).
    kernel, stride, padding, dilation = geo
    hp = 9 + 2 * padding[0]
    ow = C.conv_out_size(8, kernel[1], stride[1], padding[1], dilation[1])
    block = per_block * kernel[1] * 3 * hp * ow
    x = np.random.default_rng(3).standard_normal((3, 6, 9, 8)).astype(np.float32)
    x[0, 1, 2, 3] = -0.0
    x[1, 2, 0, 0] = np.nan
    if channel_major:
        x = np.ascontiguousarray(x.swapaxes(0, 1)).swapaxes(0, 1)
    monkeypatch.setattr(C, "_UNFOLD_BLOCK", block)
    called = []
    real = C._unfold_by_row_pitch
    monkeypatch.setattr(C, "_unfold_by_row_pitch", lambda *a: called.append(real(*a)) or called[-1])
    got = C.unfold(tj.tensor(x), kernel, stride, padding, dilation, 0.5, layout="gemm").numpy()
    assert called == [True]
    monkeypatch.setattr(C, "_unfold_by_row_pitch", lambda *a: False)
    want = C.unfold(tj.tensor(x), kernel, stride, padding, dilation, 0.5, layout="gemm").numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _fold_reference(cols, n, c, hw, kernel, padding):
    """fold of "gemm" columns (stride and dilation 1) in float64, window by window."""
    (kh, kw), (h, w), (ph, pw) = kernel, hw, padding
    oh, ow = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
    cc = cols.astype(np.float64).reshape(c, kh, kw, n, oh, ow)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + oh, j:j + ow] += cc[:, i, j].transpose(1, 0, 2, 3)
    return out[:, :, ph:ph + h, pw:pw + w]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,kernel,padding,block", [
    ((3, 5, 9, 8), (3, 3), (0, 0), 1 << 17), ((3, 5, 9, 8), (3, 2), (1, 1), 1),
    ((2, 7, 6, 9), (2, 4), (0, 2), 300), ((2, 3, 7, 7), (5, 5), (2, 2), 1 << 17),
    ((2, 3, 5, 6), (1, 1), (0, 0), 1 << 17), ((2, 4, 6, 7), (2, 4), (0, 0), 200)])
def test_fold_gemm_numpy_form_by_row_pitch(monkeypatch, dtype, shape, kernel, padding, block):
    # Stride 1: row offsets summed in a scratch at the columns' pitch, then column offsets
    # over flat runs (blocks of 1 channel up to all). Against float64 window-by-window sums
    # and the per-offset adds (the order of the adds differs: float rounding, nothing
    # more), the same layout; a -0.0 alone in a sum gives +0.0 as the adds into zeros do;
    # inf and NaN reach the positions their windows cover.
    n, c, h, w = shape
    (kh, kw), (ph, pw) = kernel, padding
    oh, ow = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
    cols = np.random.default_rng(5).standard_normal((c * kh * kw, n * oh * ow)).astype(dtype)
    cols[0, 0] = -0.0                           # (ch 0, i 0, j 0) of image 0's (0, 0)
    cols[kh * kw, 3] = np.inf
    cols[-1, -1] = np.nan
    monkeypatch.setattr(C, "_FOLD_BLOCK", block)
    called = []
    real = C._fold_by_row_pitch
    monkeypatch.setattr(C, "_fold_by_row_pitch", lambda *a: called.append(real(*a)) or called[-1])
    got = C.fold(tj.tensor(cols), (h, w), kernel, 1, padding, 1, layout="gemm").numpy()
    assert called == [True]
    monkeypatch.setattr(C, "_fold_by_row_pitch", lambda *a: False)
    per_offset = C.fold(tj.tensor(cols), (h, w), kernel, 1, padding, 1, layout="gemm").numpy()
    ref = _fold_reference(cols, n, c, (h, w), kernel, padding)
    assert got.shape == per_offset.shape == (n, c, h, w) and got.dtype == dtype
    assert got.strides == per_offset.strides
    tol = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-13}[dtype]
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, per_offset, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    if (ph, pw) == (0, 0) and kh * kw > 1:
        corner = got[0, 0, 0, 0]                # the one term there is cols[0, 0] = -0.0
        assert corner == 0 and not np.signbit(corner)
        assert per_offset[0, 0, 0, 0] == 0 and not np.signbit(per_offset[0, 0, 0, 0])


def test_fold_by_row_pitch_declines_windows_wider_than_the_rows():
    cols = np.ones((1 * 1 * 3, 2 * 1 * 2), np.float32)   # kernel (1, 3) over width 3: OW 1 < 3
    img = np.empty((1, 2, 2, 3), np.float32)
    assert C._fold_by_row_pitch(cols, img, (1, 3), 2, 1) is False


def test_input_gradient_fold_by_row_pitch_matches_the_col2im_kernel(monkeypatch):
    # A stride-1 conv's column gradient, LeNet's second conv at batch 8: the col2im kernel
    # against fold's numpy form, which sums the same terms in another order: float32
    # rounding, 1e-5.
    pytest.importorskip("numba")
    rng = np.random.default_rng(7)
    w = rng.standard_normal((64, 32 * 9)).astype(np.float32) * 0.1
    g = rng.standard_normal((64, 8 * 11 * 11)).astype(np.float32)
    cols = w.T @ g
    kernel = _col2im_native(cols, 8, 32, (13, 13), (3, 3), (1, 1), (0, 0), (1, 1))
    called = []
    fold_form = C._fold_by_row_pitch
    monkeypatch.setattr(C, "_fold_by_row_pitch",
                        lambda *a: called.append(fold_form(*a)) or called[-1])
    numpy_form = C.fold(tj.tensor(cols), (13, 13), (3, 3), layout="gemm").numpy()
    assert called == [True]
    assert np.abs(kernel).max() > 1
    np.testing.assert_allclose(numpy_form, kernel, rtol=1e-5, atol=1e-5)


# Geometries whose output rows are long enough for col2im's rows form (conv_kernels
# `_ROWS_MIN`) at unit column stride (column-strided ones take the phases form): row
# strides 1 to 3, padding, dilation, and a 9x9 window (81 offsets, past the unrolled
# form's limit).
ROWS_GEOMETRIES = [((3, 3), (1, 1), (1, 1), (1, 1), (18, 20)),
                   ((4, 4), (2, 1), (1, 1), (1, 1), (34, 36)),
                   ((3, 2), (3, 1), (0, 3), (2, 1), (17, 37)),
                   ((5, 5), (1, 1), (2, 2), (1, 1), (16, 16)),
                   ((9, 9), (1, 1), (4, 4), (1, 1), (12, 17))]


def _rows_cols(dtype, geo, n=2, c=3):
    kernel, stride, padding, dilation, (h, w) = geo
    oh = C.conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    cols = np.random.default_rng(9).standard_normal((c * kernel[0] * kernel[1], n * oh * ow))
    cols = cols.astype(dtype)
    cols[0, 0] = -0.0
    cols[-1, 5] = np.inf
    cols[1, -1] = np.nan
    return cols, ow


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", ROWS_GEOMETRIES)
def test_col2im_rows_form_matches_unrolled_and_numpy_forms(monkeypatch, dtype, geo):
    # The rows form adds window offset by window offset into each zeroed plane, the
    # unrolled form pixel by pixel, the numpy form offset by offset over the whole image:
    # the same terms in other orders (rounding only), inf and NaN where their windows reach.
    pytest.importorskip("numba")
    kernel, stride, padding, dilation, (h, w) = geo
    cols, ow = _rows_cols(dtype, geo)
    assert K.col2im_form(kernel, stride, ow) == "rows"
    args = (cols, 2, 3, (h, w), kernel, stride, padding, dilation)
    rows = _col2im_native(*args)
    assert rows.shape == (2, 3, h, w) and rows.flags.c_contiguous
    assert rows.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-13
    numpy_form = C.fold(tj.tensor(cols), (h, w), kernel, stride, padding, dilation, layout="gemm").numpy()
    np.testing.assert_allclose(rows, numpy_form, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.isnan(rows), np.isnan(numpy_form))
    assert np.isinf(rows).any() and np.abs(rows[np.isfinite(rows)]).max() > 1
    if kernel[0] * kernel[1] <= K._MAX_UNROLL:
        monkeypatch.setattr(K, "_ROWS_MIN", 1 << 30)
        unrolled = _col2im_native(*args)
        np.testing.assert_allclose(rows, unrolled, rtol=tol, atol=tol)
        np.testing.assert_array_equal(np.isnan(rows), np.isnan(unrolled))


def test_col2im_rows_form_zeroes_what_no_window_reaches():
    # Stride 3 with a 1x1 window leaves two of three columns and rows unreached: zeros, over
    # an output buffer that held garbage; a -0.0 alone in its sum gives +0.0.
    pytest.importorskip("numba")
    cols = np.full((2, 1 * 6 * 6), 7.0, np.float32)
    cols[1, 0] = -0.0
    img = _col2im_native(cols, 1, 2, (16, 16), (1, 1), (3, 3), (0, 0), (1, 1))
    want = np.zeros((1, 2, 16, 16), np.float32)
    want[:, :, ::3, ::3] = 7.0
    want[0, 1, 0, 0] = 0.0
    np.testing.assert_array_equal(img, want)
    assert not np.signbit(img[0, 1, 0, 0])


@pytest.mark.parametrize("geo", ROWS_GEOMETRIES[:3])
def test_col2im_rows_form_split_over_channels_gives_the_same_bits(geo):
    pytest.importorskip("numba")
    from inputs import same_bits_under_uneven_split
    kernel, stride, padding, dilation, (h, w) = geo
    cols, _ = _rows_cols(np.float32, geo, c=5)
    same_bits_under_uneven_split(
        lambda: (_col2im_native(cols, 2, 5, (h, w), kernel, stride, padding, dilation),),
        lambda n: [(0, 2), (2, 2), (2, 3), (3, n)], calls=1)


# (kernel, stride, padding, dilation, (h, w)): output rows shorter than _TABLE_MAX_OW, or
# with a column stride too short for the phases form (8 to 20 columns: the last nine)
TABLE_GEOMETRIES = [((3, 3), (1, 1), (1, 1), (1, 1), (4, 4)),
                    ((3, 3), (2, 2), (1, 1), (1, 1), (8, 7)),
                    ((1, 1), (2, 2), (0, 0), (1, 1), (7, 9)),
                    ((3, 2), (1, 2), (2, 1), (2, 1), (5, 6)),
                    ((5, 5), (1, 1), (2, 2), (1, 1), (3, 5)),
                    ((3, 3), (2, 2), (1, 1), (1, 1), (16, 17)),
                    ((4, 4), (2, 2), (1, 1), (1, 1), (16, 16)),
                    ((4, 4), (2, 2), (1, 1), (1, 1), (9, 32)),
                    ((2, 3), (1, 3), (3, 4), (1, 2), (6, 20)),
                    ((1, 1), (1, 2), (0, 0), (1, 1), (4, 19)),
                    ((3, 3), (2, 2), (1, 1), (1, 1), (16, 40)),
                    ((4, 4), (2, 2), (1, 1), (1, 1), (16, 37)),
                    ((2, 3), (1, 3), (3, 4), (1, 2), (6, 56)),
                    ((1, 1), (1, 2), (0, 0), (1, 1), (4, 39))]


def _native_im2col_equals_numpy(dtype, geo, seed):
    """im2col's native form for `geo` gives the numpy form's bits, NaN and -0.0 included;
    returns the output width (it decides which form runs)."""
    pytest.importorskip("numba")
    kernel, stride, padding, dilation, (h, w) = geo
    x = np.random.default_rng(seed).standard_normal((3, 5, h, w)).astype(dtype)
    x[0, 1, 0, 0] = np.nan
    x[2, 4, -1, -1] = -0.0
    oh = C.conv_out_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = C.conv_out_size(w, kernel[1], stride[1], padding[1], dilation[1])
    cols = _im2col_native(x, kernel, stride, padding, dilation, -2.5, oh, ow)
    assert cols.dtype == dtype
    layout = "gemm"
    want = C._unfold_impl(np, x, kernel, stride, padding, dilation, -2.5, layout=layout)
    np.testing.assert_array_equal(cols, want)
    assert np.array_equal(np.signbit(cols), np.signbit(want))
    return ow


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", TABLE_GEOMETRIES)
def test_im2col_table_form_copies_the_numpy_forms_bits(dtype, geo):
    # The table form reads each output through a tabulated source position (-1: padding,
    # the pad value): plain copies, so the same bits as numpy's strided copy, NaN included.
    assert K.im2col_form(geo[0], geo[1], _native_im2col_equals_numpy(dtype, geo, seed=4)) == "table"


def test_im2col_table_form_split_over_channels_gives_the_same_bits():
    pytest.importorskip("numba")
    from inputs import same_bits_under_uneven_split
    x = np.random.default_rng(5).standard_normal((2, 5, 4, 4)).astype(np.float32)
    same_bits_under_uneven_split(
        lambda: (_im2col_native(x, (3, 3), (1, 1), (1, 1), (1, 1), 0.0, 4, 4),),
        lambda n: [(0, 2), (2, 2), (2, 3), (3, n)], calls=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", [dict(stride=1, padding=1), dict(stride=2, padding=1),
                                 dict(stride=1, padding=2, dilation=2), dict(stride=1, padding=0),
                                 dict(stride=1, padding=1, groups=2)])
def test_conv2d_on_short_rows_matches_torch(dtype, cfg):
    # 5 x 5 inputs: output rows shorter than _TABLE_MAX_OW, so the columns come from the
    # table form of im2col; values and gradients of input, weight and bias.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 5, 5)).astype(dtype)
    w = rng.standard_normal((6, 4 // cfg.get("groups", 1), 3, 3)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    tx, tw, tb = (tj.tensor(v, requires_grad=True) for v in (x, w, b))
    out = tj.nn.functional.conv2d(tx, tw, tb, **cfg)
    px, pw, pb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    want = torch.nn.functional.conv2d(px, pw, pb, **cfg)
    g = rng.standard_normal(tuple(want.shape)).astype(dtype)
    out.backward(tj.tensor(g))
    want.backward(torch.tensor(g))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    for mine, ref in ((tx, px), (tw, pw), (tb, pb)):
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=tol, atol=tol)


# (kernel, stride, padding, dilation, (h, w)): output rows at least _TABLE_MAX_OW long
# with unit column stride, so the rows form of im2col; padding past the window's reach
# (window columns that read no input column), dilation and row strides that leave the
# last rows unread.
IM2COL_ROWS_GEOMETRIES = [((3, 3), (1, 1), (1, 1), (1, 1), (9, 11)),
                             ((3, 3), (2, 1), (1, 1), (1, 1), (16, 40)),
                             ((4, 4), (3, 1), (1, 2), (1, 1), (14, 37)),
                             ((2, 3), (3, 1), (3, 4), (1, 2), (6, 56)),
                             ((5, 5), (1, 1), (2, 2), (1, 1), (3, 9)),
                             ((1, 1), (2, 1), (0, 0), (1, 1), (4, 39)),
                             # unit strides, output rows as long as the input's: one run per
                             # image, dilated, and padded past the window's reach
                             ((3, 3), (1, 1), (2, 2), (2, 2), (10, 12)),
                             ((5, 3), (1, 1), (2, 1), (1, 1), (8, 9)),
                             ((3, 3), (1, 1), (4, 1), (1, 1), (6, 9))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", IM2COL_ROWS_GEOMETRIES)
def test_im2col_rows_form_copies_the_numpy_forms_bits(dtype, geo):
    # The rows form copies each window row, the pad value where the window reads outside
    # the image: plain copies, so the same bits as numpy's strided copy, NaN and -0.0
    # included.
    assert K.im2col_form(geo[0], geo[1], _native_im2col_equals_numpy(dtype, geo, seed=7)) == "runs"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", [dict(stride=1, padding=1), dict(stride=1, padding=2, dilation=2),
                                 dict(stride=1, padding=0), dict(stride=1, padding=(1, 0))])
@pytest.mark.parametrize("batch", [1, 3])
def test_conv2d_input_gradient_as_forward_form_matches_torch(dtype, cfg, batch):
    # fewer output than input channels at unit stride on rows of 10: the input gradient runs
    # as a forward convolution of the gradient (conv_blocks._as_forward); eager and compiled
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((batch, 6, 9, 10)).astype(dtype)
    w = rng.standard_normal((4, 6, 3, 3)).astype(dtype)
    px, pw = (torch.tensor(v, requires_grad=True) for v in (x, w))
    want = torch.nn.functional.conv2d(px, pw, None, **cfg)
    g = rng.standard_normal(tuple(want.shape)).astype(dtype)
    want.backward(torch.tensor(g))
    tol = 1e-5 if dtype == "float32" else 1e-12
    for fn in (tj.nn.functional.conv2d, tj.compile(lambda a, b: tj.nn.functional.conv2d(a, b, None, **cfg))):
        tx, tw = (tj.tensor(v, requires_grad=True) for v in (x, w))
        out = fn(tx, tw, None, **cfg) if fn is tj.nn.functional.conv2d else fn(tx, tw)
        out.backward(tj.tensor(g))
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=tol, atol=tol)
