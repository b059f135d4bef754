"""ops/step_slices.py: a tensor's pieces as one autograd node whose backward is one cat
(chunk) or stack (unbind_steps), against PyTorch's chunk and unbind."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.step_slices import chunk, unbind_steps

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dim", [0, -1])
def test_chunk_is_one_node_with_torchs_gradient(dim):
    x = np.random.default_rng(0).standard_normal((6, 8)).astype("float32")
    a, b = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pa, pb = chunk(a, 2, dim), torch.chunk(b, 2, dim)
    assert pa[0].grad_fn is pa[1].grad_fn is not None
    for p, q in zip(pa, pb):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    (pa[1] * 3).sum().backward()      # (the first piece gets no gradient: zeros there)
    (pb[1] * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_unbind_steps_and_chunk_without_gradients_are_plain_ops():
    x = tj.arange(12.0).reshape(3, 4)
    assert chunk(x, 2, 1)[0].grad_fn is None
    assert [t.tolist() for t in unbind_steps(x, 1)] == [[0.0, 4.0, 8.0], [1.0, 5.0, 9.0],
                                                        [2.0, 6.0, 10.0], [3.0, 7.0, 11.0]]
    a = tj.tensor(x.numpy(), requires_grad=True)
    s = unbind_steps(a, 1)
    (s[0] + 2 * s[3]).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.tile([1.0, 0.0, 0.0, 2.0], (3, 1)).astype("float32"))


def _pieces_of(m, name, t):
    """The pieces each member of the split family makes of `t` (module `m`: tj or torch)."""
    return {"chunk": lambda: m.chunk(t, 3, -1), "split": lambda: t.split([1, 0, 4], 1),
            "split_size": lambda: m.split(t, 2, 0), "unbind": lambda: t.unbind(-2),
            "tensor_split": lambda: m.tensor_split(t, [2, 3], 1),
            "method_chunk": lambda: t.chunk(2, 0)}[name]()


def _loss(m, pieces):
    # the first piece used twice, the middle ones unused, the last once (cubed)
    first, last = pieces[0], pieces[-1]
    return (first * first).sum() + (first * 2).sum() + (last * last * last).sum()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["chunk", "split", "split_size", "unbind", "tensor_split",
                                  "method_chunk"])
def test_split_family_is_one_node_with_torchs_values_and_gradients(name, dtype):
    x = np.random.default_rng(1).standard_normal((5, 5)).astype(dtype)
    a, b = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pa, pb = _pieces_of(tj, name, a * 1), _pieces_of(torch, name, b * 1)
    assert len(pa) == len(pb) and len({id(p.grad_fn) for p in pa}) == 1
    for p, q in zip(pa, pb):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    tol = 1e-5 if dtype == "float32" else 1e-12
    ga, = tj.autograd.grad(_loss(tj, pa), a, create_graph=True)
    gb, = torch.autograd.grad(_loss(torch, pb), b, create_graph=True)
    np.testing.assert_allclose(ga.detach().numpy(), gb.detach().numpy(), rtol=tol, atol=tol)
    # second order, through the node's backward (a cat or stack of the pieces' gradients)
    gga, = tj.autograd.grad((ga * ga).sum(), a)
    ggb, = torch.autograd.grad((gb * gb).sum(), b)
    np.testing.assert_allclose(gga.numpy(), ggb.numpy(), rtol=tol, atol=tol)
    # first order without a graph: the gradients written into one array
    a.grad = None
    _loss(tj, _pieces_of(tj, name, a)).backward()
    b.grad = None
    _loss(torch, _pieces_of(torch, name, b)).backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol)


def test_split_family_without_gradients_and_out_of_order_sections_are_plain_slices():
    x = tj.arange(12.0).reshape(3, 4)
    assert all(p.grad_fn is None for p in x.chunk(2, 1))
    a, b = tj.tensor(x.numpy(), requires_grad=True), torch.tensor(x.numpy(), requires_grad=True)
    pa, pb = tj.tensor_split(a, [3, 1], 1), torch.tensor_split(b, [3, 1], 1)   # (overlapping)
    sum(p.sum() * (k + 1) for k, p in enumerate(pa)).backward()
    sum(p.sum() * (k + 1) for k, p in enumerate(pb)).backward()
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    with tj.no_grad():
        assert all(p.grad_fn is None for p in a.split(1, 0))
