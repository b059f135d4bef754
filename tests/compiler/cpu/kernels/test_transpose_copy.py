"""Copies of transposed matrices by tiles (compiler/cpu/kernels/transpose_copy.py): the
source's values bit for bit in C order for every shape it takes (edges of partial tiles,
batches, nan and signed zeros), PyTorch's through eager tensors and autograd, and declines
for layouts it does not take."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

import tracejit as tj  # noqa: E402
from special_values import eager_kernels_sync  # noqa: E402,F401
from tracejit.compiler.cpu.kernels import transpose_copy  # noqa: E402


pytestmark = pytest.mark.usefixtures("eager_kernels_sync")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("root", [(256, 512), (130, 140), (3, 67, 129), (2, 2, 64, 128), (8192, 2), (3, 8192)], ids=str)
def test_the_kernel_copies_the_transposes_bits(dtype, root):
    x = np.random.default_rng(0).standard_normal(root).astype(dtype)
    flat = x.reshape(-1)
    flat[::17] = -0.0
    flat[5::31] = np.nan
    flat[7::37] = -np.inf
    v = x.swapaxes(-1, -2)
    got = transpose_copy.copy(v)
    assert got is not None, "the kernel declined a call it takes"
    assert got.flags.c_contiguous and got.shape == v.shape and got.dtype == v.dtype
    assert got.tobytes() == np.ascontiguousarray(v).tobytes()


@pytest.mark.parametrize("x", [
    np.ones((256, 512), np.float32),                        # C-contiguous already
    np.ones((256, 512), np.int64).T,                        # integers
    np.ones((32, 32), np.float32).T,                        # below MIN_ELEMENTS
    np.ones((4, 256, 512), np.float32).transpose(1, 0, 2),  # the last dim kept
    np.ones((256, 1024), np.float32)[:, ::2].T,             # a strided root
    np.broadcast_to(np.ones((1, 512), np.float32), (256, 512)).T,
])
def test_the_kernel_declines_other_layouts(x):
    assert transpose_copy.copy(x) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_contiguous_and_its_gradient_are_pytorchs(dtype):
    x = torch.randn(96, 192, dtype=dtype, generator=torch.Generator().manual_seed(1))
    tx = x.clone().requires_grad_(True)
    jx = tj.tensor(x.numpy(), requires_grad=True)
    want, got = tx.t().contiguous(), jx.t().contiguous()
    assert got.is_contiguous() and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    g = torch.randn(want.shape, dtype=dtype, generator=torch.Generator().manual_seed(2))
    (want * g).sum().backward()
    (got * tj.tensor(g.numpy())).sum().backward()
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())


def test_eager_batched_transpose_copies_are_pytorchs():
    x = torch.randn(5, 70, 90, generator=torch.Generator().manual_seed(3))
    jx = tj.tensor(x.numpy())
    # (clone keeps a dense view's strides, as PyTorch's: no C-order copy there)
    for want, got in [(x.transpose(1, 2).contiguous(), jx.transpose(1, 2).contiguous()),
                      (x.mT.clone(), jx.mT.clone()),
                      (x.permute(0, 2, 1).contiguous(), jx.permute(0, 2, 1).contiguous())]:
        assert got.is_contiguous() == want.is_contiguous()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
