"""The pooling primitives' CPU kernels, rendered from their windows groups
(compiler/cpu/kernels/window_forms.py), give exactly the numpy forms' results.

The kernels run in the primitives' eager implementations when loaded (the test suite runs
in TRACEJIT_COMPILE=sync mode, where the first call loads them); the numpy forms are what
runs without them. Both must agree bit for bit: values, the first-maximum rule for ties,
NaN windows, padding and dilation, float32 and float64 (overlapping windows' max
gradients add in another order: equal up to rounding there); and the average's.
"""
from __future__ import annotations

import numpy as np
import pytest
from inputs import pool_input

pytest.importorskip("numba")

from tracejit.ops import pooling_prim as P  # noqa: E402
from tracejit.compiler.cpu.kernels import window_forms as WF  # noqa: E402

GEOMETRIES = [((2, 2), (2, 2), (0, 0), (1, 1)),    # tiles (LeNet)
              ((3, 3), (2, 2), (1, 1), (1, 1)),    # overlap + padding
              ((3, 2), (1, 2), (1, 1), (2, 1)),    # rectangular, dilation
              ((2, 3), (2, 3), (0, 0), (1, 1))]    # rectangular tiles, rows/columns left over


def _both(monkeypatch, fn):
    """fn() with the kernels, then with the numpy forms."""
    with_kernel = fn()
    monkeypatch.setattr(WF, "_fn", lambda *a: None)
    without = fn()
    monkeypatch.undo()
    return with_kernel, without




@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("data", ["normal", "ties", "nan", "-inf", "channel-major"])
def test_max_kernels_equal_numpy_forms(monkeypatch, dtype, geo, data):
    x = pool_input(data, dtype)
    fwd = lambda: P.MAX_POOL2D.run(np, x, *geo)  # noqa: E731
    out, out_np = _both(monkeypatch, fwd)
    np.testing.assert_array_equal(out, out_np)
    assert out.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("data", ["normal", "channel-major"])
def test_average_kernels_equal_numpy_forms(monkeypatch, dtype, geo, data):
    x = pool_input(data, dtype)
    out, out_np = _both(monkeypatch, lambda: P.AVG_POOL2D.run(np, x, *geo))
    np.testing.assert_array_equal(out, out_np)
    g = np.random.default_rng(2).standard_normal(out.shape).astype(dtype)
    if data == "channel-major":
        g = np.ascontiguousarray(g.swapaxes(0, 1)).swapaxes(0, 1)
    gx, gx_np = _both(monkeypatch, lambda: P.AVG_POOL2D_BACKWARD.run(np, g, x.shape, *geo))
    np.testing.assert_array_equal(gx, gx_np)
    assert gx.dtype == dtype and gx.shape == x.shape


def test_kernels_ran():
    """The comparisons above are not numpy against itself: in sync mode the kernels load."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    geo = dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    out = WF.max_pool2d(x, **geo)
    assert out is not None and out.shape == (1, 1, 2, 2)
    assert WF.avg_pool2d(x, **geo) is not None
    assert WF.avg_pool2d_backward(out, x.shape, **geo) is not None


def test_channel_major_stays_channel_major():
    """Eager activations are (C, N, H, W) in memory: results keep that order."""
    x = np.random.default_rng(0).standard_normal((3, 5, 6, 6)).astype(np.float32).swapaxes(0, 1)
    geo = dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    out = WF.max_pool2d(x, **geo)
    rec = WF.forward_offsets(x, **geo)
    gx = WF.scatter(np.ones_like(out), rec, x.shape, **geo)
    assert WF.channel_major(out) and WF.channel_major(rec[0]) and WF.channel_major(gx)
    np.testing.assert_array_equal(out, P.MAX_POOL2D.run(np, np.ascontiguousarray(x), (2, 2), (2, 2),
                                                        (0, 0), (1, 1)))


def test_large_windows_and_other_dtypes_stay_on_numpy():
    x = np.zeros((1, 1, 9, 9), np.float32)
    geo = dict(kernel=(9, 9), stride=(9, 9), padding=(0, 0), dilation=(1, 1))
    assert WF.max_pool2d(x, **geo) is None     # 81 positions > windows.MAX_POSITIONS
    xi = np.zeros((1, 1, 4, 4), np.int32)
    assert WF.max_pool2d(xi, **dict(geo, kernel=(2, 2), stride=(2, 2))) is None


@pytest.mark.parametrize("geo", GEOMETRIES[:3])
def test_parallel_and_serial_variants_give_the_same_bits(monkeypatch, geo):
    """The parallel variant shares whole planes: its bits are the serial one's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 9, 11)).astype(np.float32)
    x[1, 2, 3, 4] = np.nan
    kw = dict(zip(("kernel", "stride", "padding", "dilation"), geo))

    def run():
        rec = WF.forward_offsets(x, **kw)
        g = np.linspace(-1, 1, rec[0].size, dtype=np.float32).reshape(rec[0].shape)
        return rec, WF.max_pool2d(x, **kw), WF.scatter(g, rec, x.shape, **kw), WF.avg_pool2d(x, **kw)
    serial = run()
    monkeypatch.setattr(WF, "PARALLEL_MIN", 1)
    parallel = run()
    for a, b in zip(serial, parallel):
        assert a is not None and b is not None
        np.testing.assert_array_equal(a, b)


def test_tiles_scatter_writes_every_position():
    """The scatter writes into an uninitialized array: positions past the last window (odd
    H and W) must get zeros from the kernel itself."""
    x = np.random.default_rng(0).standard_normal((3, 4, 9, 11)).astype(np.float32)
    geo = dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    rec = WF.forward_offsets(x, **geo)
    g = np.ones(rec.shape[1:], np.float32)
    gx = WF.scatter(g, rec, x.shape, **geo)
    assert not np.isnan(gx).any()
    assert not gx[:, :, 8, :].any() and not gx[:, :, :, 10].any()
    assert gx.sum() == g.size          # one 1 per window


@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("data", ["normal", "ties", "nan", "channel-major"])
def test_bf16_words_pool_in_one_pass_like_float32_rounded(geo, data):
    """The poolings take bf16 words: one kernel that widens on load, computes in float32
    and rounds on store (a fold's store: windows._round_on_store; a gather's loads:
    windows._gather_words), giving the float32 forms' results rounded once: the maxima and
    offsets exactly, the averages and the gradients rounded."""
    from tracejit import bf16
    from tracejit.ops.pool_offsets import MAX_POOL2D_SCATTER, MAX_POOL2D_WITH_OFFSETS
    x32 = pool_input(data, np.float32)
    words = bf16.to_bfloat16(x32)
    if data == "channel-major":
        words = np.ascontiguousarray(words.swapaxes(0, 1)).swapaxes(0, 1)
    wide = bf16.to_float32(words)
    kw = dict(zip(("kernel", "stride", "padding", "dilation"), geo))
    for fn, prim in ((WF.max_pool2d, P.MAX_POOL2D), (WF.forward_offsets, MAX_POOL2D_WITH_OFFSETS),
                     (WF.avg_pool2d, P.AVG_POOL2D)):
        got = fn(words, **kw)
        assert got is not None and got.dtype == bf16.STORAGE, prim.name
        want = bf16.to_bfloat16(prim.run(np, wide, *geo))
        np.testing.assert_array_equal(got, want, err_msg=prim.name)
    rec = WF.forward_offsets(words, **kw)
    g = bf16.to_bfloat16(np.random.default_rng(4).standard_normal(rec.shape[1:]).astype(np.float32))
    for fn, prim, args in ((WF.scatter, MAX_POOL2D_SCATTER, (g, rec)), (WF.avg_pool2d_backward,
                                                                     P.AVG_POOL2D_BACKWARD, (g,))):
        got = fn(*args, x32.shape, **kw)
        assert got is not None and got.dtype == bf16.STORAGE, prim.name
        want = bf16.to_bfloat16(prim.run(np, *[bf16.to_float32(a) for a in args], x32.shape, *geo))
        np.testing.assert_array_equal(got, want, err_msg=prim.name)
    nests = {k[0]: n for k, n in WF._forms.items() if k[1] == "uint16" and k[2] == tuple(map(tuple, geo))}
    fold, gather = nests["max_pool2d_with_offsets"], nests["max_pool2d_scatter"]
    assert [o.dtype for o in fold.outputs] == ["bfloat16"] and [s.note for s in fold.steps] == ["cast"]
    assert [o.dtype for o in gather.operands] == ["bfloat16"] * 2 and [s.note for s in gather.steps] == ["cast"]


def test_a_form_lowers_alike_under_no_grad():
    """A backward asks for its kernels under no_grad, and the form it lowers is cached
    for every later call: the bf16 scatter must be one windows group there too."""
    import tracejit as tj
    from tracejit.ops.pool_offsets import MAX_POOL2D_SCATTER
    params = dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), input_shape=(2, 3, 6, 6))
    shapes = [((2, 3, 3, 3), "bfloat16"), ((2, 2, 3, 3, 3), "bfloat16")]
    with tj.no_grad():
        nest = WF._lower(MAX_POOL2D_SCATTER, shapes, params)
    assert [o.dtype for o in nest.operands] == ["bfloat16"] * 2
