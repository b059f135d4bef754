"""A product's weight gradient ``g @ b.T`` over a long inner dimension as ``(b @ g.T).T``
(ops/linalg.py `_long_inner`, `nt_rows_first`: BLAS's M the longer side), and the forms
a linear layer's gradient keeps."""
from __future__ import annotations

import numpy as np

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.gemm import blas_gemm
from tracejit.ops import linalg


def test_which_products_take_the_rows_first_form():
    # LeNet's second conv (g (64, 7744), cols (289, 7744)) and wider ones: yes
    assert linalg.nt_rows_first(64, 289, 7744)
    assert linalg.nt_rows_first(10, 289, 7744)
    # LeNet's first conv (more output channels than column rows), square, short inner: no
    assert not linalg.nt_rows_first(32, 10, 43264)
    assert not linalg.nt_rows_first(64, 64, 7744)
    assert not linalg.nt_rows_first(64, 289, 1000)
    # a symbolic dimension: no
    assert not linalg.nt_rows_first(64, 289, object())


def _products(monkeypatch) -> list:
    """(a.shape, b.shape) of every product blas_gemm.matmul runs from now on."""
    seen: list = []
    real = blas_gemm.matmul

    def spy(a, b, *args, **kwargs):
        seen.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b, *args, **kwargs)
    monkeypatch.setattr(blas_gemm, "matmul", spy)
    return seen


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
