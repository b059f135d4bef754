"""cat of channels-last inputs keeps their format, as PyTorch's does; mixed formats give
row-major results. Values and strides against PyTorch, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

A = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
B = np.random.default_rng(1).standard_normal((2, 3, 4, 5, 2)).astype(np.float32)


def _both(fn, x, fmt):
    want = fn(torch, torch.tensor(x).contiguous(memory_format=getattr(torch, fmt)))
    got = fn(tj, tj.tensor(x).contiguous(memory_format=getattr(tj, fmt)))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.stride() == want.stride()
    return got


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat_keeps_channels_last(dim):
    got = _both(lambda m, x: m.cat([x, x * 2], dim), A, "channels_last")
    assert got.is_contiguous(memory_format=tj.channels_last)


def test_cat_keeps_channels_last_3d():
    _both(lambda m, x: m.cat([x, x + 1], 1), B, "channels_last_3d")


def test_cat_of_mixed_formats_is_row_major():
    _both(lambda m, x: m.cat([x, x.contiguous()], 1), A, "channels_last")
    _both(lambda m, x: m.cat([x.contiguous(), x], 0), A, "channels_last")


def test_cat_channels_last_backward():
    x = tj.tensor(A).contiguous(memory_format=tj.channels_last).requires_grad_()
    tj.cat([x, x], 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(A, 2.0))


def test_cat_channels_last_compiled():
    x = tj.tensor(A).contiguous(memory_format=tj.channels_last)
    got = tj.compile(lambda a: tj.cat([a, a], 1))(x)
    want = torch.cat([torch.tensor(A)] * 2, 1).contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.stride() == want.stride()
