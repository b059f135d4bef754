"""Hardsigmoid and hardswish as one primitive each (ops/hardswish_prim.py): PyTorch's
values and its gradients, strict bounds at -3 and 3 included, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch")

# the bounds themselves, both sides of them, the middle, and more than a vector's width
_X = np.concatenate([[-4.0, -3.0, -2.0, 0.0, 3.0, 4.0, 2.5, -2.5, np.inf, -np.inf],
                     np.random.RandomState(0).randn(60) * 4]).astype(np.float32)


@pytest.mark.parametrize("name", ["hardsigmoid", "hardswish"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_match_pytorch(name, compiled):
    w = np.linspace(0.5, 2.0, _X.size).astype(np.float32)
    got = {}
    for lib, fns in ((torch, torch.nn.functional), (tj, F)):
        x = lib.tensor(_X, requires_grad=True)

        def f(x, fns=fns, lib=lib):
            return getattr(fns, name)(x * 1.0) * lib.tensor(w)
        out = (tj.compile(f) if compiled and lib is tj else f)(x)
        out.sum().backward()
        got[lib] = (out.detach().numpy(), x.grad.numpy())
    for mine, want in zip(got[tj], got[torch]):
        np.testing.assert_array_equal(mine, want)


def test_the_gradient_at_the_bounds_is_pytorchs():
    x = tj.tensor([-3.0, 3.0], requires_grad=True)
    (gs,) = tj.autograd.grad(F.hardsigmoid(x).sum(), x)
    assert gs.tolist() == [0.0, 0.0]
    (gw,) = tj.autograd.grad(F.hardswish(x).sum(), x)
    assert gw.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("name", ["hardswish"])   # (PyTorch has none for hardsigmoid)
def test_second_derivative_matches_pytorch(name):
    v = np.array([-2.0, 0.5, 1.0, 4.0], np.float32)
    got = {}
    for lib, fns in ((torch, torch.nn.functional), (tj, F)):
        x = lib.tensor(v, requires_grad=True)
        (g,) = lib.autograd.grad(getattr(fns, name)(x).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), x, allow_unused=True)
        got[lib] = np.zeros_like(v) if gg is None else gg.detach().numpy()
    np.testing.assert_allclose(got[tj], got[torch], rtol=1e-6)


@pytest.mark.parametrize("name", ["hardsigmoid", "hardswish"])
def test_inplace_writes_the_input_with_pytorchs_gradient(name):
    got = {}
    for lib, fns in ((torch, torch.nn.functional), (tj, F)):
        x = lib.tensor(_X[:10], requires_grad=True)
        y = x * 2.0
        out = getattr(fns, name)(y, inplace=True)
        assert out is y
        out.sum().backward()
        got[lib] = (y.detach().numpy(), x.grad.numpy())
    for mine, want in zip(got[tj], got[torch]):
        np.testing.assert_array_equal(mine, want)


def test_large_inputs_through_the_eager_kernels_match_pytorch():
    # (81920 elements: forward and backward each run as one kernel once it has loaded)
    from tracejit.compiler.cpu.kernels import vectorized
    x = (np.random.default_rng(8).standard_normal((64, 32, 40)) * 4).astype(np.float32)
    x.reshape(-1)[:5] = [-3.0, 3.0, 0.0, np.nan, -np.inf]
    g = np.random.default_rng(9).standard_normal(x.shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.hardswish(tx)
    (tg,) = torch.autograd.grad(ty, tx, torch.tensor(g))
    for _ in range(2):
        jx = tj.tensor(x, requires_grad=True)
        jy = tj.nn.functional.hardswish(jx)
        (jg,) = tj.autograd.grad(jy, jx, tj.tensor(g))
        vectorized.settle(60)
    assert jg.grad_fn is None and jy.grad_fn.name() == "HardswishBackward0"
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jg.numpy(), tg.numpy(), rtol=1e-6, atol=1e-7)
