"""The per-channel affine's CPU kernels (compiler/cpu/kernels/channel_affine.py) against
the primitive's numpy form: the forward's values, the backward's record."""
import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import channel_affine as K
from tracejit.ops.channel_affine_prim import CHANNEL_AFFINE, CHANNEL_AFFINE_BACKWARD


@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 4, 6, 7), (2, 3, 2, 3, 4), (5, 2)])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("has_b", [True, False])
def test_kernels_match_the_numpy_forms(shape, dtype, tol, has_b):
    rng = np.random.default_rng(len(shape))
    x, g = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    w, b = (rng.standard_normal(shape[1]).astype(dtype) for _ in range(2))
    wb = (w, b) if has_b else (w,)
    y = K.forward(x, *wb, has_w=True, has_b=has_b)
    assert y is not None     # (tests load kernels in the call)
    expected = CHANNEL_AFFINE.impl(np, x, *wb, has_w=True, has_b=has_b)
    np.testing.assert_allclose(y, expected, rtol=tol, atol=tol)
    rec = K.backward(g, x, w, has_w=True, has_b=has_b)
    assert rec is not None and rec.shape == (x.size + (2 if has_b else 1) * shape[1],)
    expected = CHANNEL_AFFINE_BACKWARD.impl(np, g, x, w, has_w=True, has_b=has_b)
    np.testing.assert_allclose(rec, expected, rtol=tol, atol=tol * 10)
    axes = (0,) + tuple(range(2, len(shape)))
    np.testing.assert_allclose(rec[x.size:x.size + shape[1]], (g.astype(np.float64) * x).sum(axes),
                               rtol=tol, atol=tol * 10)


def test_kernels_decline_what_they_do_not_take():
    x = np.ones((2, 3, 4), np.float32)
    w = np.ones(3, np.float32)
    assert K.forward(x, w[::-1].astype(np.float64), has_w=True, has_b=False) is None
    strided = x.transpose(0, 2, 1).copy().transpose(0, 2, 1)
    assert K.forward(strided, w, has_w=True, has_b=False) is None
    assert K.forward(x, w, has_w=False, has_b=True) is None
    assert K.backward(x.astype(np.float16), x.astype(np.float16), w.astype(np.float16), has_w=True,
                      has_b=True) is None
