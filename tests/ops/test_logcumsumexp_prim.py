"""logcumsumexp as a primitive (ops/logcumsumexp_prim.py): PyTorch's values where prefixes
span a wide range (the composite's global shift underflowed them to -inf), nan and +inf
reaching only later prefixes, gradients and second derivatives, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

inf, nan = float("inf"), float("nan")
ROWS = [[-1000.0, 0.0, 1.0], [1.0, nan, 2.0], [-inf, -inf, 1.0], [0.5, inf, 1.0], [3.0, -2.0, 0.25]]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("row", range(len(ROWS)))
def test_values_and_gradients_as_torch(row, dtype):
    res = []
    for lib in (torch, tj):
        x = lib.tensor(ROWS[row], dtype=getattr(lib, dtype), requires_grad=True)
        y = x.logcumsumexp(0)
        (y * lib.tensor([1.0, -2.0, 3.0], dtype=getattr(lib, dtype))).sum().backward()
        res.append((y.detach().numpy(), x.grad.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-6)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_second_derivative_and_compiled_as_torch(dim):
    x0 = np.random.default_rng(0).standard_normal((3, 4))
    w = np.random.default_rng(1).standard_normal((3, 4))
    res = []
    for lib in (torch, tj):
        x = lib.tensor(x0, requires_grad=True)
        (g,) = lib.autograd.grad((x.logcumsumexp(dim) * lib.tensor(w)).sum(), x, create_graph=True)
        (g * lib.tensor(w[::-1].copy())).sum().backward()
        res.append((g.detach().numpy(), x.grad.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-10)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-9, atol=1e-12)
    f = tj.compile(lambda a: (a.logcumsumexp(dim) * tj.tensor(w)).sum())
    x = tj.tensor(x0, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), res[0][0], rtol=1e-10)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_long_float32_scan_keeps_pytorchs_precision(compiled):
    # (PyTorch carries float32's running value in float64: a float32 carry drifted 4e-5
    # after 10^4 steps)
    a = (np.random.default_rng(0).standard_normal((3, 10000))).astype(np.float32)
    want = torch.logcumsumexp(torch.tensor(a), 1).numpy()
    f = tj.compile(lambda x: tj.logcumsumexp(x, 1)) if compiled else (lambda x: tj.logcumsumexp(x, 1))
    got = f(tj.tensor(a))
    assert got.dtype == tj.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=2e-6)
