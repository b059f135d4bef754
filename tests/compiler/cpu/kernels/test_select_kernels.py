"""relu_backward's one-pass kernel (compiler/cpu/kernels/select_kernels.py) against its numpy form: bitwise."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import tracejit as tj  # noqa: E402
from tracejit.ops import elementwise  # noqa: E402
from tracejit.compiler.cpu.kernels import select_kernels

N = select_kernels.MIN_ELEMENTS  # the smallest size the kernel takes


def _operands(dtype, n=N + 37):
    rng = np.random.default_rng(0)
    g = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-30], dtype)
    # every special value of g against every special value of y
    g[:49] = np.repeat(special, 7)
    y[:49] = np.tile(special, 7)
    tiny = np.finfo(dtype).smallest_subnormal
    y[49:51] = (tiny, -tiny)
    return g, y


def _numpy_form(g, y, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("TRACEJIT_EAGER_KERNELS", "0")
        return elementwise._relu_backward_impl(np, g, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_is_bitwise_the_numpy_form(dtype, monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    g, y = _operands(dtype)
    got = select_kernels.relu_backward_flat(np, g, y)
    assert got is not None, "the kernel should take contiguous float operands this large"
    want = _numpy_form(g, y, monkeypatch)
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = np.dtype(f"i{np.dtype(dtype).itemsize}")
    np.testing.assert_array_equal(got.view(bits), want.view(bits))
    # and the reference meaning: g where y > 0, else +0.0
    ref = np.where(y > 0, g, dtype(0))
    np.testing.assert_array_equal(got.view(bits), ref.view(bits))


def test_eager_op_runs_the_kernel_on_large_operands(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    g, y = _operands(np.float32)
    g, y = g[:N].reshape(128, -1), y[:N].reshape(128, -1)
    want = _numpy_form(g, y, monkeypatch)
    calls = []
    orig = select_kernels.relu_backward_flat

    def spy(xp, a, b):
        out = orig(xp, a, b)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(select_kernels, "relu_backward_flat", spy)
    out = elementwise.relu_backward(tj.tensor(g), tj.tensor(y)).numpy()
    np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32))
    # the kernel ran, unless the dispatcher's generated kernel (compiler/cpu/kernels/vectorized.py) did
    from tracejit.compiler.cpu.kernels import vectorized
    assert calls == [True] or vectorized.stats()["launches"] > 0


@pytest.mark.parametrize("case", ["strided", "broadcast", "small", "mixed dtypes", "int"])
def test_other_operands_take_the_numpy_form(case, monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    g, y = _operands(np.float32, 2 * N)
    if case == "strided":
        g, y = g[::2], y[::2]
    elif case == "broadcast":
        y = y[:N // 2 + 1]
        g = g[:2 * (N // 2 + 1)].reshape(2, -1)
    elif case == "small":
        g, y = g[:100], y[:100]
    elif case == "mixed dtypes":
        y = y.astype(np.float64)
    else:
        r = np.random.default_rng(1)
        g, y = r.integers(-50, 50, 2 * N).astype(np.int32), r.integers(-50, 50, 2 * N).astype(np.int32)
    assert select_kernels.relu_backward_flat(np, g, y) is None
    got = elementwise._relu_backward_impl(np, g, y)
    ref = np.where(y > 0, g, 0).astype(got.dtype)
    np.testing.assert_array_equal(got, ref)


def test_relu_gradient_through_autograd_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    w = rng.standard_normal((64, 1024)).astype(np.float32)
    xt = tj.tensor(x, requires_grad=True)
    (tj.relu(xt) * tj.tensor(w)).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    (torch.relu(xr) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), xr.grad.numpy())
