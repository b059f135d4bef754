"""A product's gradient ``g @ b.T`` over a long inner dimension (a convolution's weight
gradient) runs with BLAS's M the longer side, as the backend's one rule decides
(compiler/cpu/gemm/products.py `rows_first`; matmul's VJP writes ``g @ b.T``), and the
forms a linear layer's gradient keeps."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.gemm import blas_gemm, products


def _products(monkeypatch) -> list:
    """(a.shape, b.shape) of every product blas_gemm.matmul runs from now on."""
    seen: list = []
    real = blas_gemm.matmul

    def spy(a, b, *args, **kwargs):
        seen.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b, *args, **kwargs)
    monkeypatch.setattr(blas_gemm, "matmul", spy)
    return seen


@pytest.mark.parametrize("compiled", [False, True])
def test_a_long_inner_gradient_runs_rows_first(monkeypatch, compiled):
    """w (64, 289) @ cols (289, 7744), as LeNet's second conv: w's gradient g @ cols.T
    runs as cols @ g.T (OpenBLAS's M the longer side), with torch's values."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(products, "_blas_name", [True])
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((64, 289)).astype(np.float32)
    c0 = rng.standard_normal((289, 7744)).astype(np.float32)
    w = tj.tensor(w0, requires_grad=True)
    cols = tj.tensor(c0)

    def loss(w, cols):
        return (tj.matmul(w, cols) ** 2).sum()
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")     # (the compiled program from the first call)
    monkeypatch.setenv("TRACEJIT_GEMM_CHOICE", "0")
    seen = _products(monkeypatch)
    step = tj.trace(loss) if compiled else loss
    for _ in range(2):
        w.grad = None
        out = step(w, cols)
        out.backward()
    assert (type(out.grad_fn).__name__ == "CompiledNode") == compiled
    assert ((289, 7744), (7744, 64)) in seen, seen
    assert ((64, 7744), (7744, 289)) not in seen, seen
    wt = torch.tensor(w0, requires_grad=True)
    (torch.matmul(wt, torch.tensor(c0)) ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-2)


def test_a_linear_layers_weight_gradient_keeps_its_form(monkeypatch):
    """``x @ w.T`` with a long batch: its weight gradient stays ``g.T @ x`` (a transposed
    `b`, not the NT form the rule is for)."""
    rng = np.random.default_rng(6)
    x = tj.tensor(rng.standard_normal((600, 40)).astype(np.float32), requires_grad=True)
    w = tj.tensor(rng.standard_normal((90, 40)).astype(np.float32), requires_grad=True)
    seen = _products(monkeypatch)
    (F.linear(x, w) ** 2).sum().backward()
    assert ((600, 90), (90, 40)) in seen, seen      # input gradient g @ w
    assert ((90, 600), (600, 40)) in seen, seen     # weight gradient g.T @ x
    want = 2 * (x.detach().numpy().astype(np.float64) @ w.detach().numpy().T).T @ x.detach().numpy()
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-4, atol=1e-3)
