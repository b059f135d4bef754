"""The depthwise convolution's plane loops (compiler/cpu/kernels/depthwise_kernels.py)
against PyTorch over odd geometries: kernels 1 to 7, strides that do and do not divide the
window, padding past the window's reach, dilation, channel multipliers, a batch of one,
non-contiguous operands, and the planes split into parts (as the threads take them)."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import depthwise_kernels as K

# (N, C, H, W, multiplier, kernel, stride, padding, dilation)
GEOMETRIES = [
    (2, 3, 9, 8, 1, (3, 3), (1, 1), (1, 1), (1, 1)),
    (1, 4, 10, 11, 2, (3, 3), (2, 2), (1, 1), (1, 1)),
    (2, 2, 7, 9, 1, (1, 1), (2, 2), (0, 0), (1, 1)),
    (1, 3, 12, 7, 2, (5, 5), (1, 2), (3, 2), (1, 1)),
    (2, 4, 13, 13, 1, (7, 7), (2, 2), (3, 3), (1, 1)),
    (1, 2, 9, 10, 1, (3, 3), (1, 1), (2, 2), (2, 2)),
    (3, 2, 5, 6, 3, (3, 2), (3, 1), (0, 3), (1, 2)),
    (1, 1, 1, 17, 2, (1, 5), (1, 2), (0, 2), (1, 1)),     # conv1d's form: one row
    (2, 3, 11, 9, 1, (3, 3), (2, 2), (0, 0), (2, 2)),     # stride 2 with dilation, odd sizes
    (1, 2, 10, 13, 2, (3, 3), (2, 3), (1, 1), (2, 1)),    # a stride of 3 in one dim
]


def _torch(torch, x, w, c, s, p, d, u):
    tx = torch.tensor(np.ascontiguousarray(x), requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw, None, s, p, d, c)
    y.backward(torch.tensor(u))
    return y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()


def _kernels_or_skip():
    for which in ("forward", "xgrad", "wgrad"):
        for dt in (np.float32, np.float64):
            k = K._kernel(("depthwise", which, np.dtype(dt).name),
                          lambda which=which, dt=dt: K._source(which, np.dtype(dt).name))
            if not k.load_now():
                pytest.skip("the depthwise kernels do not load here")


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_planes_match_torch(monkeypatch, geo, dtype, split):
    torch = pytest.importorskip("torch")
    _kernels_or_skip()
    if split:       # the planes in parts of one or two, as the threads' shares take them
        def parts(fn, n, work):
            for lo in range(0, n, 2):
                fn(lo, min(n, lo + 2))
        monkeypatch.setattr(K._sharepool, "split", parts)
    n, c, h, w, m, k, s, p, d = geo
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c, w, h)).astype(dtype).transpose(0, 1, 3, 2)   # not C-contiguous
    wt = rng.standard_normal((c * m, 1) + k).astype(dtype)
    b = rng.standard_normal(c * m).astype(dtype)
    params = dict(kernel=k, stride=s, padding=p, dilation=d)
    y = K.forward(x, wt, **params)
    u = rng.standard_normal(y.shape).astype(dtype)
    ry, rdx, rdw = _torch(torch, x, wt, c, s, p, d, u)
    yb = K.forward(x, wt, b, **params)
    dx = K.xgrad(u[:, :, ::-1][:, :, ::-1], wt, (h, w), c, **params)     # a negative-stride view
    dw = K.wgrad(u, x, **params)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for a, r in ((y, ry), (yb, ry + b.reshape(1, -1, 1, 1)), (dx, rdx), (dw, rdw)):
        assert a.shape == r.shape and a.dtype == dtype and a.flags.c_contiguous
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol * 10)


def test_other_dtypes_are_declined():
    x = np.ones((1, 2, 4, 4), np.int64)
    w = np.ones((2, 1, 3, 3), np.int64)
    assert not K.operands(x, w)
    assert K.forward(x, w, kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1)) is None
