"""log_softmax as a primitive (ops/log_softmax_prim.py): values and gradients against
PyTorch's over every dim and float dtype, infinite rows as PyTorch treats them, a second
derivative, the compiled form (the rows form over the last dim, the numpy form elsewhere),
and PyTorch's saved tensors: the backward reads the result, so writing in place into the
input after the call (cross-entropy's logits too) leaves the gradient alone."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _grads(lib, fn, x, w):
    xs = lib.tensor(x, requires_grad=True)
    y = fn(lib, xs)
    (y * lib.tensor(w)).sum().backward()
    return y.detach().numpy(), xs.grad.numpy()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_matches_torch(dtype, dim):
    x = np.random.default_rng(0).uniform(-20, 20, (3, 4, 5)).astype(dtype)
    w = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(dtype)
    want, got = (_grads(lib, lambda lib, a: lib.log_softmax(a, dim), x, w) for lib in (torch, tj))
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}[dtype]
    np.testing.assert_allclose(got[0].astype(np.float64), want[0], rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1].astype(np.float64), want[1], rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("shape,dim", [((), 0), ((0, 3), 1), ((3, 0), 1), ((1, 1), 0)])
def test_edge_shapes_match_torch(shape, dim):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    w = np.ones(shape, np.float32)
    want, got = (_grads(lib, lambda lib, a: lib.log_softmax(a, dim), x, w) for lib in (torch, tj))
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], atol=1e-6)


def test_infinite_rows_as_torch():
    inf = float("inf")
    x = np.array([[-inf, -inf, -inf], [1.0, 2.0, inf], [-inf, 0.0, 1.0]], np.float32)
    w = np.ones_like(x)
    want, got = (_grads(lib, lambda lib, a: lib.log_softmax(a, 1), x, w) for lib in (torch, tj))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)   # nan where PyTorch's is


def test_second_derivative_matches_torch():
    x = np.random.default_rng(2).standard_normal((3, 5))
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        y = (lib.log_softmax(xs, 1) * lib.arange(5.0, dtype=xs.dtype)).sum()
        (g,) = lib.autograd.grad(y, xs, create_graph=True)
        (g * g).sum().backward()
        res.append((g.detach().numpy(), xs.grad.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-12)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-10, atol=1e-12)


def test_one_node_each_way():
    x = tj.randn(4, 6, requires_grad=True)
    y = tj.log_softmax(x, 1)
    assert y.grad_fn.name() == "LogSoftmaxBackward0"
    assert [type(f).__name__ for f, _ in y.grad_fn.next_functions] == ["AccumulateGrad"]


LOSSES = {
    "log_softmax": lambda lib, h: (lib.nn.functional.log_softmax(h, 1) * lib.arange(5.0)).sum(),
    "log_softmax_dim0": lambda lib, h: (lib.nn.functional.log_softmax(h, 0) * lib.arange(5.0)).sum(),
    "softmax": lambda lib, h: (lib.nn.functional.softmax(h, 1) * lib.arange(5.0)).sum(),
    "cross_entropy_probs": lambda lib, h: lib.nn.functional.cross_entropy(
        h, lib.softmax(lib.arange(20.0).reshape(4, 5) / 7.0, 1)),
    "cross_entropy_smoothed": lambda lib, h: lib.nn.functional.cross_entropy(
        h, lib.tensor([0, 2, 4, 1]), label_smoothing=0.1),
    "cross_entropy_3d": lambda lib, h: lib.nn.functional.cross_entropy(
        h.reshape(2, 5, 2), lib.tensor([[0, 2], [4, 1]])),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_writing_into_the_input_after_the_call_as_torch(name, compiled):
    data = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)

    def step(lib, x):
        h = x * 1.0
        loss = LOSSES[name](lib, h)
        h.mul_(2.0)        # PyTorch's backward does not read h
        return loss
    grads = []
    for lib in (torch, tj):
        fn = tj.compile(lambda x: step(tj, x)) if compiled and lib is tj else (lambda x: step(lib, x))
        x = lib.tensor(data, requires_grad=True)
        fn(x).backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [-1, 0])
def test_compiled_matches_eager(dim):
    r = np.random.default_rng(4)
    x = r.standard_normal((6, 7)).astype(np.float32)
    t = r.standard_normal((6, 7)).astype(np.float32)

    def f(a, b):
        return (tj.log_softmax(a * 2.0 + b, dim) * b).sum()
    outs = []
    for fn in (f, tj.compile(f)):
        xs = tj.tensor(x, requires_grad=True)
        loss = fn(xs, tj.tensor(t))
        loss.backward()
        outs.append((loss.item(), xs.grad.numpy()))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5)
    np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-5, atol=1e-6)
