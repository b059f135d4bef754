"""Max-pooling's numba kernels (compiler/cpu/kernels/pool_kernels.py) give exactly the numpy forms' results.

The kernels run in the primitives' eager implementations when loaded (the test suite runs
in TRACEJIT_COMPILE=sync mode, where the first call loads them); the numpy forms are what
runs without them. Both must agree bit for bit: values, the first-maximum rule for ties,
NaN windows, padding and dilation, float32 and float64 (overlapping windows' gradients add
in another order: equal up to rounding there).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from tracejit.ops import pooling_prim as P  # noqa: E402
from tracejit.compiler.cpu.kernels import pool_kernels

GEOMETRIES = [((2, 2), (2, 2), (0, 0), (1, 1)),    # tiles (LeNet)
              ((3, 3), (2, 2), (1, 1), (1, 1)),    # overlap + padding
              ((3, 2), (1, 2), (1, 1), (2, 1)),    # rectangular, dilation
              ((2, 2), (2, 2), (0, 0), (1, 1))]


def _both(monkeypatch, fn):
    """fn() with the kernels, then with the numpy forms."""
    with_kernel = fn()
    monkeypatch.setattr(pool_kernels, "_get", lambda *a: None)
    without = fn()
    monkeypatch.undo()
    return with_kernel, without


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
@pytest.mark.parametrize("data", ["normal", "ties", "nan", "-inf", "channel-major"])
def test_kernels_equal_numpy_forms(monkeypatch, dtype, geo, data):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4, 9, 11)).astype(dtype)
    if data == "ties":
        x = np.maximum(np.round(x), 0)         # many equal maxima (ReLU'd integers)
    elif data == "nan":
        x[0, 1, 2, 3] = x[1, 2, 4, 4] = x[1, 2, 4, 5] = np.nan
    elif data == "-inf":
        x[:, :, :4, :] = -np.inf
    elif data == "channel-major":   # eager conv outputs: (C, N, H, W) memory, NCHW view
        x = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    kernel, stride, padding, dilation = geo
    fwd = lambda: P.MAX_POOL2D.run(np, x, kernel, stride, padding, dilation)  # noqa: E731
    out, out_np = _both(monkeypatch, fwd)
    np.testing.assert_array_equal(out, out_np)
    g = rng.standard_normal(out.shape).astype(dtype)
    bwd = lambda: P.MAX_POOL2D_BACKWARD.run(np, g, x, out_np, kernel, stride, padding, dilation)  # noqa: E731
    gx, gx_np = _both(monkeypatch, bwd)
    if pool_kernels.tiles(kernel, stride, padding, dilation):
        np.testing.assert_array_equal(gx, gx_np)
    else:  # overlapping windows add in another order: equal up to rounding
        np.testing.assert_allclose(gx, gx_np, rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert gx.dtype == dtype and gx.shape == x.shape


def test_kernels_ran():
    """The comparison above is not numpy against itself: in sync mode the kernels load."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    out = pool_kernels.forward(x, (2, 2), (2, 2), (0, 0), (1, 1))
    assert out is not None and out.shape == (1, 1, 2, 2)
    assert pool_kernels.backward(out, x, (2, 2), (2, 2), (0, 0), (1, 1)) is not None


def test_channel_major_stays_channel_major():
    """Eager activations are (C, N, H, W) in memory: results keep that order."""
    x = np.random.default_rng(0).standard_normal((3, 5, 6, 6)).astype(np.float32).swapaxes(0, 1)
    out = pool_kernels.forward(x, (2, 2), (2, 2), (0, 0), (1, 1))
    gx = pool_kernels.backward(np.ones_like(out), x, (2, 2), (2, 2), (0, 0), (1, 1))
    assert pool_kernels.channel_major(out) and pool_kernels.channel_major(gx)
    np.testing.assert_array_equal(out, P.MAX_POOL2D.run(np, np.ascontiguousarray(x), (2, 2), (2, 2),
                                                        (0, 0), (1, 1)))


def test_large_windows_and_other_dtypes_stay_on_numpy():
    x = np.zeros((1, 1, 9, 9), np.float32)
    assert pool_kernels.forward(x, (9, 9), (9, 9), (0, 0), (1, 1)) is None   # 81 > MAX_WINDOW
    xi = np.zeros((1, 1, 4, 4), np.int32)
    assert pool_kernels.forward(xi, (2, 2), (2, 2), (0, 0), (1, 1)) is None


@pytest.mark.parametrize("geo", GEOMETRIES[:3])
def test_kernels_split_over_planes_give_the_same_bits(geo):
    """Each kernel runs a range of (n, c) planes so that sharepool.split can share a call
    over the cores: any cut of the planes gives the bits of one whole call."""
    from inputs import same_bits_under_uneven_split
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 9, 11)).astype(np.float32)
    x[1, 2, 3, 4] = np.nan
    kernel, stride, padding, dilation = geo

    def run():
        out = pool_kernels.forward(x, kernel, stride, padding, dilation)
        g = np.linspace(-1, 1, out.size, dtype=np.float32).reshape(out.shape)
        rec = pool_kernels.forward_offsets(x, kernel, stride, padding, dilation)
        return (out, rec, pool_kernels.backward(g, x, kernel, stride, padding, dilation),
                pool_kernels.scatter(g, rec, x.shape, kernel, stride, padding, dilation))
    same_bits_under_uneven_split(run, lambda n: [(0, 1), (1, n // 2), (n // 2, n - 1),
                                                              (n - 1, n)], calls=4)


def test_tiles_scatter_writes_every_position():
    """The side-by-side scatter writes into an uninitialized array: positions past the
    last window (odd H and W) must get zeros from the kernel itself."""
    x = np.random.default_rng(0).standard_normal((3, 4, 9, 11)).astype(np.float32)
    k = (2, 2)
    rec = pool_kernels.forward_offsets(x, k, k, (0, 0), (1, 1))
    g = np.ones(rec.shape[1:], np.float32)
    fn = pool_kernels._get("scatter_tiles", lambda *a: pool_kernels.scatter_source(*a, True),
                           "float32", k, k, (0, 0), (1, 1))
    gx = np.full(x.shape, np.nan, np.float32)
    fn(g.view(np.int32), rec, gx.view(np.int32), 0, 12)
    assert not np.isnan(gx).any()
    assert not gx[:, :, 8, :].any() and not gx[:, :, :, 10].any()
    assert gx.sum() == g.size          # one 1 per window
