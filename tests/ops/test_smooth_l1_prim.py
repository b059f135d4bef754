"""smooth_l1_loss and huber_loss through one pointwise primitive each way
(ops/smooth_l1_prim.py): values, gradients for input and target and second derivatives as
PyTorch's, at the quadratic part's edges too; large inputs through the eager kernels; the
compiled path."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import vectorized

torch = pytest.importorskip("torch")

_LOSSES = [("smooth_l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0}),
           ("huber_loss", {"delta": 0.7}), ("huber_loss", {}),
           ("smooth_l1_loss", {"beta": 2.0, "reduction": "none"}), ("huber_loss", {"reduction": "sum"})]


@pytest.mark.parametrize("n", [300, 70000])   # (the second through the eager kernels)
@pytest.mark.parametrize("name, kw", _LOSSES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_and_two_derivatives_match_pytorch(name, kw, dtype, n):
    rng = np.random.default_rng(n)
    t = rng.standard_normal(n).astype(dtype)
    x = (t + rng.standard_normal(n) * 1.5).astype(dtype)
    edge = kw.get("beta", kw.get("delta", 1.0))
    x[:5] = t[:5] + np.array([edge, -edge, 0.0, -0.0, edge / 2], dtype)   # (the edges and the middle)
    tx, tt = torch.tensor(x, requires_grad=True), torch.tensor(t, requires_grad=True)
    for _ in range(2):
        jx, jt = tj.tensor(x, requires_grad=True), tj.tensor(t, requires_grad=True)
        jy = getattr(tj.nn.functional, name)(jx, jt, **kw)
        jg = tj.autograd.grad(jy.sum(), [jx, jt], create_graph=True)
        vectorized.settle(60)
    ty = getattr(torch.nn.functional, name)(tx, tt, **kw)
    tg = torch.autograd.grad(ty.sum(), [tx, tt], create_graph=True)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    for mine, want in zip((jy,) + tuple(jg), (ty,) + tuple(tg)):
        np.testing.assert_allclose(mine.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    if edge:
        (tgg,) = torch.autograd.grad((tg[0] ** 2).sum(), tx)
        (jgg,) = tj.autograd.grad((jg[0] ** 2).sum(), jx)
        np.testing.assert_allclose(jgg.numpy(), tgg.numpy(), rtol=tol, atol=tol)


def test_compiled_matches_eager():
    rng = np.random.default_rng(3)
    x, t = rng.standard_normal((8, 16)).astype(np.float32) * 2, rng.standard_normal((8, 16)).astype(np.float32)
    f = lambda a, b: tj.nn.functional.smooth_l1_loss(a, b, beta=0.5) + tj.nn.functional.huber_loss(a, b, delta=2.0)
    jx, ex = tj.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    tj.compile(f)(jx, tj.tensor(t)).backward()
    with tj.eager():
        f(ex, tj.tensor(t)).backward()
    np.testing.assert_allclose(jx.grad.numpy(), ex.grad.numpy(), rtol=1e-6, atol=1e-7)
