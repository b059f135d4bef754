"""The direct convolution kernel for few output channels (compiler/cpu/kernels/
conv_direct.py) against PyTorch over odd geometries: output channels below, at and past
a tile (several tiles, a partial last one), row strides, dilation, padding up to and past
the window's reach, a 1x1 window with padding, a batch of one, blocks of one image, bias;
float32 and float64. And the rule that sends conv_blocks' forward to it."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import conv_blocks as B
from tracejit.compiler.cpu.kernels import conv_direct as D

# (N, C, H, W, O, kernel, stride, padding, dilation)
GEOMETRIES = [
    (2, 3, 9, 18, 4, (3, 3), (1, 1), (1, 1), (1, 1)),
    (1, 5, 7, 20, 8, (3, 3), (1, 1), (0, 0), (1, 1)),
    (2, 2, 11, 19, 11, (3, 2), (2, 1), (2, 0), (2, 3)),
    (3, 4, 6, 17, 1, (1, 1), (1, 1), (1, 1), (1, 1)),
    (1, 3, 5, 16, 3, (4, 4), (1, 1), (4, 5), (1, 1)),
    (2, 6, 10, 24, 17, (5, 3), (3, 1), (1, 2), (1, 2)),
]


@pytest.mark.parametrize("block", [1 << 19, 1])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_direct_forward_matches_torch(monkeypatch, geo, block):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(B, "_BLOCK_BYTES", block)
    n, c, h, w, o, k, s, p, d = geo
    rng = np.random.default_rng(sum(geo[:5]))
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k), rng.standard_normal(o)
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), s, p, d).numpy()
    oh, ow = ref.shape[2:]
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-4)):
        for bias in (None, b.astype(dtype)):
            got = D.direct_forward(x.astype(dtype), wt.astype(dtype), bias, k, s, p, d, oh, ow, B._blocks)
            assert got.shape == ref.shape and got.dtype == dtype and got.flags.c_contiguous
            want = ref if bias is not None else ref - b.reshape(o, 1, 1)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_direct_forward_reads_channel_major_input():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 8, 20)).swapaxes(0, 1)      # (N, C, H, W) in (C, N, H, W) memory
    wt = rng.standard_normal((5, 4, 3, 3))
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), None, 1, 1).numpy()
    got = D.direct_forward(x, wt, None, (3, 3), (1, 1), (1, 1), (1, 1), 8, 20, B._blocks)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("o, stride, ow, direct", [
    (8, (1, 1), 64, True),
    (1, (2, 1), 80, True),       # a row stride: window rows stay contiguous runs
    (9, (1, 1), 64, False),      # more channels: im2col + GEMM
    (8, (1, 2), 64, False),      # a column stride: strided gathers
    (8, (1, 1), 63, False),      # rows too short for the vector loop
])
def test_direct_rule(o, stride, ow, direct):
    assert D.direct_fits(o, stride, ow) is direct


def test_forward_takes_the_direct_form(monkeypatch):
    """conv_blocks' forward runs the direct kernel where the rule says, equal to its im2col
    + GEMM form within rounding."""
    calls = []
    real = D.direct_forward
    monkeypatch.setattr(B, "direct_forward", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(5)
    x, wt = rng.standard_normal((2, 6, 5, 64)), rng.standard_normal((8, 6, 3, 3))
    geo = dict(kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    got = B.forward(x, wt, **geo)
    assert calls
    monkeypatch.setattr(B, "_DIRECT", False)
    np.testing.assert_allclose(got, B.forward(x, wt, **geo), rtol=1e-12, atol=1e-12)
