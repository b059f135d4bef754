"""ops/conv_nd.py: the 3-D transposed convolution's shapes and its error for a padding
that leaves no output, beside PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("padding", [(0, 1, 1), (1, 0, 0)])
def test_conv_transpose3d_names_itself_and_every_size_when_none_is_left(padding):
    x, w = np.ones((1, 2, 1, 1, 1), np.float32), np.ones((2, 3, 1, 1, 1), np.float32)
    with pytest.raises(RuntimeError, match="too small"):
        torch.nn.functional.conv_transpose3d(torch.tensor(x), torch.tensor(w), padding=padding)
    want = tuple(1 - 2 * p for p in padding)
    with pytest.raises(RuntimeError, match=rf"conv_transpose3d: output size \({want[0]}, {want[1]}, {want[2]}\) "
                                           rf"is not positive \(input size \(1, 1, 1\)\)"):
        F.conv_transpose3d(tj.tensor(x), tj.tensor(w), padding=padding)


def test_conv_transpose3d_matches_pytorch_with_stride_padding_and_output_padding():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32), rng.standard_normal((2, 3, 2, 3, 3)).astype(np.float32)
    kw = dict(stride=2, padding=1, output_padding=1)
    want = torch.nn.functional.conv_transpose3d(torch.tensor(x), torch.tensor(w), **kw).numpy()
    got = F.conv_transpose3d(tj.tensor(x), tj.tensor(w), **kw).numpy()
    assert got.shape == want.shape == (1, 3, 5, 8, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, wshape, kw", [
    ((2, 6, 5, 3, 4), (4, 6, 3, 1, 1), dict(padding=(1, 0, 0))),                  # R(2+1)D's temporal conv
    ((2, 6, 7, 3, 4), (4, 3, 2, 1, 1), dict(stride=(2, 1, 1), dilation=(2, 3, 1), groups=2)),
    ((6, 5, 3, 4), (4, 6, 3, 1, 1), dict(padding="same")),                         # unbatched
    ((2, 6, 5, 3, 4), (4, 6, 3, 1, 1), dict(stride=(1, 2, 1))),                    # strided planes: per tap
])
def test_conv3d_over_depth_alone_matches_pytorch(shape, wshape, kw):
    """A kernel over depth alone runs as one conv2d over (depth, H*W) planes: PyTorch's
    values, a row-major result and the gradients of input (strided), weight and bias."""
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal(shape[:-4] + (shape[-3], shape[-4]) + shape[-2:]).astype(np.float32)
    w0, b0 = rng.standard_normal(wshape).astype(np.float32), rng.standard_normal(wshape[0]).astype(np.float32)
    got = []
    for lib in (tj, torch):
        x, w, b = (lib.tensor(a, requires_grad=True) for a in (x0, w0, b0))
        y = lib.nn.functional.conv3d(x.transpose(-4, -3), w, b, **kw)
        (y * y).sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()))
        if lib is tj:
            assert y._data.flags.c_contiguous or kw.get("stride") == (1, 2, 1)
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
