"""A convolution's weight gradient as ``(cols @ g.T).T`` (ops/linalg.py `_long_inner`,
`nt_rows_first`): matmul's VJP computes ``g @ b.T`` over a long inner dimension with BLAS's M
the longer side, eagerly and in compiled plans (jit/passes.py `_transposed_matmul` leaves
that form alone), and the gradients are PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.gemm import blas_gemm
from tracejit.ops import linalg
from tracejit.testing import assert_compiled_matches
from inputs import training_variant


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


def _conv_case(dtype):
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal((8, 6, 10, 10)).astype(dtype)     # k = N*L = 8*64 = 512
    w0 = (rng.standard_normal((7, 6, 3, 3)) * 0.2).astype(dtype)   # m 7, n 6*9+1 = 55
    b0 = rng.standard_normal(7).astype(dtype)
    g0 = rng.standard_normal((8, 7, 8, 8)).astype(dtype)
    return x0, w0, b0, g0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eager_conv_weight_gradient_is_the_rows_first_product_and_torchs(monkeypatch, dtype):
    torch = pytest.importorskip("torch")
    x0, w0, b0, g0 = _conv_case(dtype)
    seen = _products(monkeypatch)
    x, w, b = (tj.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    (F.conv2d(x, w, b) * tj.tensor(g0)).sum().backward()
    # the weight gradient: cols (55, 512) @ g.T (512, 7), not g (7, 512) @ cols.T (512, 55)
    assert ((55, 512), (512, 7)) in seen and ((7, 512), (512, 55)) not in seen, seen
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    (torch.nn.functional.conv2d(tx, tw, tb) * torch.tensor(g0)).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-11)
    for ours, theirs in ((w, tw), (b, tb), (x, tx)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), **tol)
    # the weight's gradient is an ordinary row-major array (the leaf copied the view)
    assert w.grad.numpy().flags.c_contiguous
    # reference in float64: sum over images and positions of g times the windows
    cols = np.lib.stride_tricks.sliding_window_view(x0.astype(np.float64), (3, 3), axis=(2, 3))
    want = np.einsum("nohw,nchwij->ocij", g0.astype(np.float64), cols)
    np.testing.assert_allclose(w.grad.numpy(), want, **tol)


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


@pytest.mark.parametrize("mode", ["trace", "script"])
def test_compiled_conv_keeps_the_rows_first_product_and_matches_eager(mode):
    x0, w0, b0, g0 = _conv_case("float32")
    g = tj.tensor(g0)

    def loss(x, w, b):
        return (F.conv2d(x, w, b) * g).sum()
    x, w, b = (tj.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    cf = assert_compiled_matches(loss, x, w, b, mode=mode, rtol=1e-5, atol=1e-4)
    # a loss: its gradients come with the forward plan
    items = [it for plan in training_variant(cf) if plan is not None for it in getattr(plan, "items", ())]
    shapes = []
    for it in items:
        for e in (getattr(it, "first", None), getattr(it, "second", None), it):
            prim = getattr(getattr(e, "prim", None), "name", None)
            if prim == "matmul":
                shapes.append(tuple(tuple(a.aval.shape) for a in e.inputs))
    # the weight gradient's product in the plan: cols (55, 512) @ g.T (512, 7)
    assert ((55, 512), (512, 7)) in shapes and ((7, 512), (512, 55)) not in shapes, shapes
