"""Softshrink, hardshrink and threshold as one primitive each, sharing one derivative
(ops/shrink_prim.py): values and gradients equal to PyTorch's at both kernel sizes (band
edges, infinities and nan included), integer inputs, the in-place threshold, second
derivatives and the compiled path."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import shrink_prim

torch = pytest.importorskip("torch")
TF = torch.nn.functional

CASES = [("softshrink", (0.5,), "SoftshrinkBackward0"),
         ("softshrink", (0.0,), "SoftshrinkBackward0"),
         ("hardshrink", (0.5,), "HardshrinkBackward0"),
         ("threshold", (0.3, -7.0), "ThresholdBackward0"),
         ("threshold", (-1.0, 2.5), "ThresholdBackward0")]


def _input(n, dtype, rng):
    x = rng.standard_normal(n).astype(dtype)
    x[:9] = [0.0, 0.5, -0.5, 0.3, -1.0, np.inf, -np.inf, 2.5, np.nan]
    return x


@pytest.mark.parametrize("name,args,grad_name", CASES)
@pytest.mark.parametrize("n", [40, 300_000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_and_gradients_match_pytorch(name, args, grad_name, n, dtype):
    rng = np.random.default_rng(n)
    x = _input(n, dtype, rng)
    g = rng.standard_normal(n).astype(dtype)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    t_out = getattr(TF, name)(tx, *args)
    j_out = getattr(tj.nn.functional, name)(jx, *args)
    assert j_out.grad_fn.name() == grad_name
    assert j_out.dtype == tj.float32 if dtype == np.float32 else j_out.dtype == tj.float64
    np.testing.assert_array_equal(j_out.detach().numpy(), t_out.detach().numpy())
    t_out.backward(torch.tensor(g))
    j_out.backward(tj.tensor(g))
    # (a nan input's gradient differs between PyTorch's own scalar and vector kernels)
    np.testing.assert_array_equal(jx.grad.numpy()[9:], tx.grad.numpy()[9:])
    np.testing.assert_array_equal(jx.grad.numpy()[:8], tx.grad.numpy()[:8])


def test_integer_threshold_keeps_its_dtype_and_bad_lambda_is_refused():
    got = tj.nn.functional.threshold(tj.tensor([1, 2, 3]), 2, 9)
    assert got.dtype == tj.int64 and got.tolist() == TF.threshold(torch.tensor([1, 2, 3]), 2, 9).tolist()
    with pytest.raises(Exception, match="lambda must be non-negative"):
        tj.nn.functional.softshrink(tj.tensor([1.0]), -0.5)


def test_in_place_threshold_matches_pytorch():
    a = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    grads, outs = [], []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        h = x * 2.0
        y = m.nn.functional.threshold(h, 0.1, -1.0, inplace=True)
        (y * y).sum().backward()
        outs.append(y.detach().numpy())
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(grads[1], grads[0])


@pytest.mark.parametrize("name,args,grad_name", CASES[::2])
def test_second_derivative_matches_pytorch(name, args, grad_name):
    x = np.random.default_rng(2).standard_normal((4, 5))
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    (t_g,) = torch.autograd.grad((getattr(TF, name)(tx, *args) ** 3).sum(), tx, create_graph=True)
    (j_g,) = tj.autograd.grad((getattr(tj.nn.functional, name)(jx, *args) ** 3).sum(), jx, create_graph=True)
    np.testing.assert_allclose(j_g.detach().numpy(), t_g.detach().numpy(), rtol=1e-12)
    t_g.sum().backward()
    j_g.sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    gy = shrink_prim.band_backward(tj.ones(4), tj.tensor([-2.0, -1.0, 1.0, float("nan")]), -1.0, 0.5)
    assert gy.tolist() == [1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("name,args,grad_name", CASES[::2])
def test_compiled_matches_eager(name, args, grad_name):
    x = np.random.default_rng(3).standard_normal((6, 7)).astype(np.float32)

    def f(a):
        return (getattr(tj.nn.functional, name)(a * 2.0, *args) * a).sum()

    ja = tj.tensor(x, requires_grad=True)
    want = f(ja)
    want.backward()
    want_grad = ja.grad.numpy().copy()
    ja.grad = None
    got = tj.compile(f)(ja)
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(ja.grad.numpy(), want_grad, rtol=1e-6, atol=1e-7)
