"""(..., k) @ (k, n) as one GEMM over the flattened leading dims, eager and compiled.

ops/linalg.matmul_rows is what both the eager matmul impl and compiled plans
(compiler/plan.py) call for an N-d left operand and a 2-D right one: every nn.Linear on
(batch, seq, features), and the input gradient g @ W of its backward. These tests check
that the BLAS call sees 2-D operands only, and that values (forward and gradients) are
PyTorch's, for contiguous and non-contiguous inputs and empty leading dims.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.backends import CpuBackend
from tracejit.compiler.cpu.gemm import blas_gemm
from differential import assert_compiled_matches


def _data(shape, k=6, n=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape + (k,)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return x, w, b


def _linear_loss(x, w, b):
    y = F.linear(x, w, b)
    return (y * y).sum()


@pytest.fixture
def gemm_shapes(monkeypatch):
    """Records the operand ranks of every product compiled plans and eager matmul make."""
    seen = []
    orig = blas_gemm.matmul

    def spy(a, b, blas_only=False):
        seen.append((a.ndim, b.ndim))
        return orig(a, b, blas_only=blas_only)
    monkeypatch.setattr(blas_gemm, "matmul", spy)
    # a plan's 2-D product of static shapes calls what the backend's matmul_for chose for it
    # (numpy's matmul for a tiny one): recorded the same way
    chose = CpuBackend.matmul_for

    def chosen(self, a_shape, b_shape, dtype, install=None):
        fn = chose(self, a_shape, b_shape, dtype)

        def recorded(a, b):
            seen.append((a.ndim, b.ndim))
            return fn(a, b)
        return spy if fn is spy else recorded
    monkeypatch.setattr(CpuBackend, "matmul_for", chosen)
    return seen


def test_compiled_linear_on_3d_input_runs_2d_gemms_only(gemm_shapes):
    x, w, b = _data((4, 3))
    cf = tj.trace(_linear_loss)
    xt = tj.tensor(x, requires_grad=True)
    wt = tj.tensor(w, requires_grad=True)
    bt = tj.tensor(b, requires_grad=True)
    loss = cf(xt, wt, bt)
    loss.backward()
    gemm_shapes.clear()
    for t in (xt, wt, bt):
        t.grad = None
    loss = cf(xt, wt, bt)
    loss.backward()
    # forward, the input's gradient and the weight's: three products, all 2-D
    assert len(gemm_shapes) == 3, gemm_shapes
    assert all(s == (2, 2) for s in gemm_shapes), gemm_shapes


@pytest.mark.parametrize("lead", [(4, 3), (2, 3, 2), (0, 3), (3, 0)])
def test_compiled_linear_matches_eager_and_torch(lead):
    torch = pytest.importorskip("torch")
    x, w, b = _data(lead)
    assert_compiled_matches(_linear_loss, tj.tensor(x, requires_grad=True),
                            tj.tensor(w, requires_grad=True), tj.tensor(b, requires_grad=True),
                            rtol=1e-5, atol=1e-5)
    cf = tj.trace(_linear_loss)
    xt, wt, bt = (tj.tensor(a, requires_grad=True) for a in (x, w, b))
    cf(xt, wt, bt)  # capture
    for t in (xt, wt, bt):
        t.grad = None
    cf(xt, wt, bt).backward()
    xr, wr, br = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ref = torch.nn.functional.linear(xr, wr, br)
    (ref * ref).sum().backward()
    for got, want in ((xt, xr), (wt, wr), (bt, br)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_non_contiguous_input_eager_and_compiled():
    """A transposed (seq, batch, k) view and a strided slice as the N-d operand."""
    torch = pytest.importorskip("torch")
    x, w, b = _data((3, 4), k=8)

    def f(x, w, b):
        v = x.transpose(0, 1)[:, :, ::2]     # (4, 3, 4), neither dim contiguous
        return F.linear(v, w, b)

    w = w[:, :4].copy()
    want = torch.nn.functional.linear(torch.tensor(x).transpose(0, 1)[:, :, ::2],
                                      torch.tensor(w), torch.tensor(b)).numpy()
    got = f(tj.tensor(x), tj.tensor(w), tj.tensor(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    cf = tj.trace(f)
    for _ in range(2):
        np.testing.assert_allclose(cf(tj.tensor(x), tj.tensor(w), tj.tensor(b)).numpy(), want,
                                   rtol=1e-5, atol=1e-5)
    # a non-contiguous argument to the compiled function
    xt = tj.tensor(np.ascontiguousarray(x.transpose(1, 0, 2))).transpose(0, 1)
    g = lambda x, w, b: F.linear(x, w, b)  # noqa: E731
    want2 = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w[:, :1].repeat(8, 1)),
                                       torch.tensor(b)).numpy()
    w2 = np.repeat(w[:, :1], 8, axis=1)
    cg = tj.trace(g)
    for _ in range(2):
        np.testing.assert_allclose(cg(xt, tj.tensor(w2), tj.tensor(b)).numpy(), want2,
                                   rtol=1e-5, atol=1e-5)


def test_matmul_with_2d_right_operand_compiled_values():
    """``x @ w`` (no transpose) on a 4-D left operand, value and gradients vs eager."""
    rng = np.random.default_rng(1)
    x = tj.tensor(rng.standard_normal((2, 3, 4, 5)).astype(np.float32), requires_grad=True)
    w = tj.tensor(rng.standard_normal((5, 7)).astype(np.float32), requires_grad=True)
    assert_compiled_matches(lambda x, w: ((x @ w) ** 2).sum(), x, w, rtol=1e-5, atol=1e-5)
