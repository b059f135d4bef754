"""autograd.grad's keyword arguments as PyTorch documents them: only_inputs (ignored, a
warning when False), is_grads_batched (a batch of vector-Jacobian products),
materialize_grads (zeros for unused inputs), and the gradient penalty pattern
(create_graph through a grad, then backward) compared with PyTorch, also inside a
compiled function (which then runs eagerly, as torch.compile breaks its graph there)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _pair(a):
    return tj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def test_only_inputs_is_accepted_and_false_warns():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    (g,) = tj.autograd.grad((x * x).sum(), x, only_inputs=True)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    with pytest.warns(UserWarning, match="only_inputs"):
        tj.autograd.grad((x * x).sum(), x, only_inputs=False)


def test_is_grads_batched_gives_the_jacobian_like_torch():
    a = np.random.default_rng(0).standard_normal((3,))
    x, tx = _pair(a)
    eye = np.eye(3)
    (jac,) = tj.autograd.grad(tj.sin(x) * x, x, tj.tensor(eye), is_grads_batched=True)
    (tjac,) = torch.autograd.grad(torch.sin(tx) * tx, tx, torch.tensor(eye), is_grads_batched=True)
    assert tuple(jac.shape) == (3, 3)
    np.testing.assert_allclose(jac.numpy(), tjac.numpy(), rtol=1e-12)


def test_is_grads_batched_rejects_a_mismatched_batch():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="not a batch of the output's shape"):
        tj.autograd.grad(x * 2, x, tj.ones(4, 3), is_grads_batched=True)


def test_materialize_grads_returns_zeros_for_an_unused_input():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = tj.tensor([3.0], requires_grad=True)
    gx, gy = tj.autograd.grad((x * 3).sum(), (x, y), materialize_grads=True)
    np.testing.assert_allclose(gx.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(gy.numpy(), [0.0])
    with pytest.raises(ValueError, match="allow_unused"):
        tj.autograd.grad((x * 3).sum(), (x, y), materialize_grads=True, allow_unused=False)


def test_gradient_penalty_matches_torch():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 1)).astype(np.float32)
    a = rng.standard_normal((5, 4)).astype(np.float32)
    losses, grads = [], []
    for lib in (tj, torch):
        wt = lib.tensor(w, requires_grad=True)
        x = lib.tensor(a, requires_grad=True)
        d = lib.tanh(x @ wt)
        (g,) = lib.autograd.grad(d, x, lib.ones(5, 1), create_graph=True, retain_graph=True,
                                 only_inputs=True)
        pen = ((g.norm(2, dim=1) - 1) ** 2).mean()
        pen.backward()
        losses.append(pen.item())
        grads.append(wt.grad.detach().numpy())
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-7)


def test_grad_inside_a_compiled_function_is_part_of_its_graph():
    def f(lib, x):
        y = (x.sin() * x).sum()
        g, = lib.autograd.grad(y, x, create_graph=True)
        return g

    cf = tj.compile(lambda x: f(tj, x), fullgraph=True)
    xt = torch.linspace(-1, 1, 5, requires_grad=True)
    want = f(torch, xt)
    x = tj.tensor(xt.detach().numpy(), requires_grad=True)
    got = cf(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    assert cf.cache_stats()["eager_fallbacks"] == 0 and cf.cache_stats()["compiles"] == 1
