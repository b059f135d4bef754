"""SiLU and ELU/SELU/CELU as one primitive each way (ops/silu_elu_prim.py): values, first and
second derivatives against PyTorch's (signed zeros, infinities and nan included), large
inputs through the eager kernels, float16, the in-place forms and the compiled path."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import vectorized

torch = pytest.importorskip("torch")
TF = torch.nn.functional
JF = tj.nn.functional

_FNS = {
    "silu": (TF.silu, JF.silu, "SiluBackward0"),
    "elu": (lambda x: TF.elu(x, 0.7), lambda x: JF.elu(x, 0.7), "EluBackward0"),
    "selu": (TF.selu, JF.selu, "EluBackward0"),
    "celu": (lambda x: TF.celu(x, 1.7), lambda x: JF.celu(x, 1.7), "EluBackward0"),
}


def _input(shape, dtype, rng):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x.reshape(-1)[:7] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -200.0]
    return x


def _close(got, want, dtype, tol=None):
    tol = tol or (1e-6 if dtype == np.float32 else 1e-13)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(5, 7), (64, 32, 40)])   # (the second through the eager kernels)
@pytest.mark.parametrize("name", sorted(_FNS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_and_two_derivatives_match_pytorch(name, dtype, shape):
    tf, jf, node = _FNS[name]
    rng = np.random.default_rng(len(name) + len(shape))
    x = _input(shape, dtype, rng)
    g = rng.standard_normal(shape).astype(dtype)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    for _ in range(2):   # (the second call after the eager kernel had its chance to load)
        ty, jy = tf(tx), jf(jx)
        vectorized.settle(60)
    assert jy.grad_fn.name() == node
    _close(jy, ty, dtype)
    tg, = torch.autograd.grad(ty, tx, torch.tensor(g), create_graph=True)
    jg, = tj.autograd.grad(jy, jx, tj.tensor(g), create_graph=True)
    if name != "silu":
        # At a nan PyTorch's ELU gradient is g * scale from its scalar loop (short rows,
        # tests/ops/test_activation_grads.py) but nan from its vector loop: the derivatives
        # are compared without the nan
        x.reshape(-1)[4] = 0.25
        tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        tg, = torch.autograd.grad(tf(tx), tx, torch.tensor(g), create_graph=True)
        jg, = tj.autograd.grad(jf(jx), jx, tj.tensor(g), create_graph=True)
    # (PyTorch's CELU derivative takes 1 / alpha rounded to float32: 1e-7 apart in float64)
    _close(jg, tg, dtype, 2e-7 if name == "celu" and dtype == np.float64 else None)
    tgg, = torch.autograd.grad((tg * tg).sum(), tx)
    jgg, = tj.autograd.grad((jg * jg).sum(), jx)
    # (the second derivative in float32 cancels: 1e-4 of its terms' size, where both round)
    _close(jgg, tgg, dtype, 1e-4 if dtype == np.float32 else 2e-7 if name == "celu" else None)


@pytest.mark.parametrize("name", sorted(_FNS))
def test_float16_computes_in_float32_as_pytorch(name):
    tf, jf, _ = _FNS[name]
    x = np.linspace(-6, 6, 97).astype(np.float16)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ty, jy = tf(tx), jf(jx)
    assert jy.dtype is tj.float16
    np.testing.assert_array_equal(jy.detach().numpy(), ty.detach().numpy())
    ty.sum().backward()
    jy.sum().backward()
    np.testing.assert_allclose(jx.grad.numpy().astype(np.float32), tx.grad.numpy().astype(np.float32),
                               rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("name", sorted(_FNS))
def test_in_place_module_matches_pytorch(name):
    cls = {"silu": "SiLU", "elu": "ELU", "selu": "SELU", "celu": "CELU"}[name]
    # (no nan: PyTorch's in-place ELU differentiates from its output, nan at a nan by its
    # vector loop, and the out-of-place one from its input)
    x = np.random.default_rng(1).standard_normal((4, 6)) * 4
    tw, jw = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ty = getattr(torch.nn, cls)(inplace=True)(tw * 1.0)
    jy = getattr(tj.nn, cls)(inplace=True)(jw * 1.0)
    _close(jy, ty, np.float64)
    ty.sum().backward()
    jy.sum().backward()
    _close(jw.grad, tw.grad, np.float64)


@pytest.mark.parametrize("name", sorted(_FNS))
def test_compiled_matches_eager(name):
    _, jf, _ = _FNS[name]
    x = _input((8, 16), np.float32, np.random.default_rng(2))
    step = tj.compile(lambda a: (jf(a) * 3.0).sum())
    jx, ex = tj.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    step(jx).backward()
    with tj.eager():
        (jf(ex) * 3.0).sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), ex.grad.numpy(), rtol=1e-6, atol=1e-6)
