"""logsumexp as a primitive (ops/logsumexp_prim.py): values and gradients against
PyTorch's over any dims with and without keepdim in every float dtype, infinite and nan
rows as PyTorch treats them, one autograd node each way (its backward a primitive too,
with a second derivative), and the compiled form (the rows form over the last dim, the
numpy form elsewhere)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (2, False), (-1, True)])
def test_matches_torch(dtype, dim, keepdim):
    x = np.random.default_rng(0).uniform(-30, 30, (3, 4, 5)).astype(dtype)
    w = np.random.default_rng(1).standard_normal(np.delete(np.array(x.shape), dim % 3)).astype(dtype)
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        y = lib.logsumexp(xs, dim, keepdim=keepdim)
        (y * lib.tensor(w).unsqueeze(dim) if keepdim else y * lib.tensor(w)).sum().backward()
        res.append((y.detach().numpy(), xs.grad.numpy()))
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=tol)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=tol * 10, atol=tol)


def test_infinite_rows_as_torch():
    inf = float("inf")
    x = np.array([[-inf, -inf, -inf], [1.0, 2.0, inf], [-inf, 0.0, 1.0]], np.float32)
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        y = lib.logsumexp(xs, 1)
        y.sum().backward()
        res.append((y.detach().numpy(), xs.grad.numpy()))
    np.testing.assert_array_equal(res[1][0], res[0][0])
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-6)   # nan where PyTorch's is


def test_one_node_each_way():
    x = tj.randn(4, 6, requires_grad=True)
    y = tj.logsumexp(x, 1, keepdim=True)
    assert y.grad_fn.name() == "LogsumexpBackward0"
    # its only input is the leaf: no autograd nodes of a composite in between
    assert [type(f).__name__ for f, _ in y.grad_fn.next_functions] == ["AccumulateGrad"]


@pytest.mark.parametrize("dim", [-1, 1])
def test_compiled_matches_eager(dim):
    r = np.random.default_rng(2)
    x = r.standard_normal((6, 5, 7)).astype(np.float32)
    t = r.standard_normal((6, 5, 7)).astype(np.float32)

    def f(a, b):
        # a CRF step: a broadcast sum, logsumexp, work after it
        return (tj.logsumexp(a * 2.0 + b, dim) * 0.5).sum()
    outs = []
    for fn in (f, tj.compile(f)):
        xs = tj.tensor(x, requires_grad=True)
        loss = fn(xs, tj.tensor(t))
        loss.backward()
        outs.append((loss.item(), xs.grad.numpy()))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5)
    np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("dim,keepdim", [((1, 2), True), ((0, 2), False), (None, False), ((-1, 0), True)])
def test_dims_tuples_match_torch(dtype, dim, keepdim):
    x = np.random.default_rng(3).uniform(-8, 8, (3, 4, 5)).astype(np.float32)
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)
        y = lib.logsumexp(xs, (0, 1, 2) if dim is None else dim, keepdim=keepdim)
        w = lib.tensor(np.linspace(-1, 2, y.numel(), dtype=np.float32).reshape(tuple(y.shape)),
                       dtype=getattr(lib, dtype))
        (y * w).sum().backward()
        res.append((y.detach().double().numpy(), xs.grad.double().numpy(), y.dtype))
    assert str(res[1][2]).split(".")[-1] == str(res[0][2]).split(".")[-1]
    tol = {"float16": 2e-3, "float32": 1e-6, "float64": 1e-13}[dtype]
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=tol)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("dims", [(1,), (0, 1)])
def test_infinite_and_nan_rows_over_dims_as_torch(dims):
    inf, nan = float("inf"), float("nan")
    x = np.array([[[-inf, -inf], [-inf, -inf]], [[1.0, inf], [0.0, 2.0]], [[nan, 0.0], [1.0, 2.0]]], np.float64)
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        y = lib.logsumexp(xs, dims)
        y.sum().backward()
        res.append((y.detach().numpy(), xs.grad.numpy()))
    np.testing.assert_array_equal(res[1][0], res[0][0])
    np.testing.assert_array_equal(res[1][1], res[0][1])


def test_integers_give_the_default_float():
    for lib in (torch, tj):
        y = lib.logsumexp(lib.tensor([[1, 2, 3], [0, 0, 5]]), 1)
        assert str(y.dtype).endswith("float32")
    np.testing.assert_allclose(tj.logsumexp(tj.tensor([[1, 2, 3], [0, 0, 5]]), 1).numpy(),
                               torch.logsumexp(torch.tensor([[1, 2, 3], [0, 0, 5]]), 1).numpy(), rtol=1e-6)


def test_reduced_dims_keep_one_node_and_a_second_derivative():
    x = np.random.default_rng(4).standard_normal((3, 4, 2))
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        y = lib.logsumexp(xs, (0, 2))
        assert y.grad_fn.name() == "LogsumexpBackward0"
        w = lib.tensor([1.0, -2.0, 0.5, 3.0], dtype=lib.float64)
        g, = lib.autograd.grad((y * w).sum(), xs, create_graph=True)
        gg, = lib.autograd.grad((g * g * lib.tensor(x)).sum(), xs)
        res.append((g.detach().numpy(), gg.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-12)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dim,keepdim", [(-1, False), ((0, 2), False), (1, True)])
def test_compiled_matches_eager_over_dims(dim, keepdim):
    r = np.random.default_rng(5)
    x = r.standard_normal((4, 3, 6)).astype(np.float32)

    def f(a):
        return (tj.logsumexp(a * 1.5, dim, keepdim=keepdim) ** 2).sum()
    outs = []
    for fn in (f, tj.compile(f)):
        xs = tj.tensor(x, requires_grad=True)
        loss = fn(xs)
        loss.backward()
        outs.append((loss.item(), xs.grad.numpy()))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5)
    np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-5, atol=1e-7)


def test_a_0d_tensor_as_pytorch():
    # (numpy reduced it to a scalar, which the numpy form then wrote into: a TypeError)
    res = []
    for m in (torch, tj):
        x = m.tensor(0.5, dtype=m.float64, requires_grad=True)
        y = m.nn.functional.log_softmax(x * 1.0, 0) + m.logsumexp(x * 2.0, 0, keepdim=True)
        y.backward()
        res.append((y.detach().numpy(), x.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("shape,dims,keepdim", [((32, 9, 9), (1,), False), ((32, 9, 9), (2,), True),
                                                ((40, 4, 3, 5), (1, 3), False), ((6, 70), (0,), True),
                                                ((300, 40), (1,), False), ((2, 1000), (1,), True)])
def test_short_dims_copied_front_and_long_rows_match_torch(shape, dims, keepdim):
    """The numpy form's front layout (a short reduced extent over many rows) and the CPU
    kernel's long rows give PyTorch's values and gradients, infinite and nan rows included."""
    from tracejit.ops import logsumexp_prim as L
    x = np.random.default_rng(len(shape)).uniform(-20, 20, shape).astype(np.float32)
    x.reshape(-1)[[3, 50, 51, 77]] = [float("inf"), float("-inf"), float("nan"), float("-inf")]
    x[1] = float("-inf")    # whole rows of -inf over any reduced dims but the first
    if dims[0] != 0 and np.prod([shape[d] for d in dims]) <= L.FRONT_EXTENT:
        assert L._front(x, dims) is not None     # the case takes the front layout
    res = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        y = lib.logsumexp(xs, dims, keepdim=keepdim)
        w = np.random.default_rng(5).standard_normal(tuple(y.shape)).astype(np.float32)
        (y * lib.tensor(w)).sum().backward()
        res.append((y.detach().numpy(), xs.grad.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=2e-6, atol=1e-5)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=2e-5, atol=1e-6)
