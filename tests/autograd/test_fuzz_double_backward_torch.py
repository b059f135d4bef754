"""Second derivatives against PyTorch where the first gradient has no graph of its own:
piecewise-linear ops of a leaf with nothing after them (hardshrink, softshrink, threshold,
hardtanh, relu6, max/avg pooling, adaptive pooling) give a zero second derivative, as PyTorch's backward
formulas that read their input do; det's second derivative at singular matrices (random
low-rank ones) matches PyTorch's where that is finite and finite differences of the
cofactor matrix everywhere."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

PIECEWISE = {
    "hardshrink": lambda F, x: F.hardshrink(x, 0.5), "softshrink": lambda F, x: F.softshrink(x, 0.5),
    "threshold": lambda F, x: F.threshold(x, 0.1, 20.0), "max_pool2d": lambda F, x: F.max_pool2d(x, 2),
    "avg_pool2d": lambda F, x: F.avg_pool2d(x, 2), "adaptive_max_pool2d": lambda F, x: F.adaptive_max_pool2d(x, 3),
    "adaptive_avg_pool2d": lambda F, x: F.adaptive_avg_pool2d(x, 3), "max_pool1d": lambda F, x: F.max_pool1d(x[0], 2),
    "avg_pool1d": lambda F, x: F.avg_pool1d(x[0], 2),
    "hardtanh": lambda F, x: F.hardtanh(x, -0.5, 0.5), "relu6": lambda F, x: F.relu6(x * 4),
}


@pytest.mark.parametrize("name", sorted(PIECEWISE))
def test_piecewise_linear_second_derivative_is_zero(name):
    x0 = np.random.default_rng(0).standard_normal((1, 1, 4, 4))
    got = []
    for lib in (torch, tj):
        x = lib.tensor(x0, requires_grad=True)
        (g,) = lib.autograd.grad(PIECEWISE[name](lib.nn.functional, x).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), x)
        got.append(np.asarray(gg.detach().numpy() if not gg._is_zerotensor() else np.zeros(gg.shape))
                   if lib is torch else gg.numpy())
    np.testing.assert_array_equal(got[1], got[0])
    np.testing.assert_array_equal(got[1], np.zeros(x0.shape))


def test_once_differentiable_still_refuses_a_second_derivative():
    class Cube(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @tj.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x
    x = tj.tensor([1.0, -2.0], requires_grad=True)
    (g,) = tj.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        tj.autograd.grad(g.sum(), x)


def _cofactor(a):
    n = a.shape[0]
    c = np.ones_like(a)
    for i, j in itertools.product(range(n), range(n)):
        if n > 1:
            c[i, j] = (-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1))
    return c


def _second(lib, a, w):
    x = lib.tensor(a, requires_grad=True)
    (g,) = lib.autograd.grad(lib.linalg.det(x), x, create_graph=True)
    (h,) = lib.autograd.grad((g * lib.tensor(w)).sum(), x)
    return h.numpy()


@pytest.mark.parametrize("seed", range(12))
def test_det_second_derivative_at_singular_matrices(seed):
    r = np.random.default_rng(seed)
    n = int(r.integers(1, 5))
    rank = int(r.integers(0, n + 1))
    a = r.standard_normal((n, rank)) @ r.standard_normal((rank, n))
    w = r.standard_normal((n, n))
    got = _second(tj, a, w)
    num = np.zeros_like(a)
    for k in np.ndindex(a.shape):   # (the cofactor matrix is a polynomial: central differences)
        up, down = a.copy(), a.copy()
        up[k] += 1e-6
        down[k] -= 1e-6
        num[k] = ((_cofactor(up) - _cofactor(down)) * w).sum() / 2e-6
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-6)
    try:
        want = _second(torch, a, w)
    except RuntimeError:   # (1 x 1: PyTorch's gradient is a constant without a graph)
        return
    if np.isfinite(want).all():
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
