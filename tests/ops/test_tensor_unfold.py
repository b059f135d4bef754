"""``Tensor.unfold(dim, size, step)`` against PyTorch: a view (writes reach the input),
values and gradients (overlapping windows add), strided inputs, compiled and second order."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def test_unfold_is_a_view_that_writes_through():
    for lib in (torch, tj):
        x = lib.arange(10.).reshape(2, 5)
        u = x.unfold(1, 3, 1)
        assert tuple(u.shape) == (2, 3, 3)
        u[0, 1, 0] = 100.
        u[1].fill_(0)     # (one value into overlapping windows: defined in both libraries)
        assert x[0, 1].item() == 100. and x[1].abs().sum().item() == 0
    with pytest.raises(RuntimeError, match="single memory location"):
        u[0].mul_(2)      # (an arithmetic write there depends on the visiting order: refused)
    assert x[0].tolist() == [0., 100., 2., 3., 4.]
    c = tj.arange(6., requires_grad=True)
    d = c * 1
    d.unfold(0, 2, 2).mul_(3)      # in place through the view under autograd
    (d * tj.arange(6.)).sum().backward()
    np.testing.assert_array_equal(d.detach().numpy(), np.arange(6.) * 3)
    np.testing.assert_array_equal(c.grad.numpy(), np.arange(6.) * 3)


@pytest.mark.parametrize("dim,size,step", [(1, 3, 1), (-1, 2, 2), (2, 3, 2), (0, 1, 5), (2, 6, 1)])
@pytest.mark.parametrize("compiled", [False, True])
def test_unfold_values_and_gradients_match_torch(dim, size, step, compiled):
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((3, 8, 5)).astype(np.float32)

    def f(x, w):
        u = x.transpose(1, 2).unfold(dim, size, step)   # from a non-contiguous view
        return (u * w).tanh().sum(), u

    xt = torch.tensor(x0, requires_grad=True)
    ut = xt.detach().transpose(1, 2).unfold(dim, size, step)
    w0 = rng.standard_normal(tuple(ut.shape)).astype(np.float32)
    lt, ut = f(xt, torch.tensor(w0))
    lt.backward()
    g = tj.compile(f) if compiled else f
    for _ in range(2):
        xj = tj.tensor(x0, requires_grad=True)
        lj, uj = g(xj, tj.tensor(w0))
        lj.backward()
        np.testing.assert_allclose(uj.detach().numpy(), ut.detach().numpy())
        np.testing.assert_allclose(lj.item(), lt.item(), rtol=1e-5)
        np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_unfold_second_derivative_and_edges():
    x0 = np.random.default_rng(1).standard_normal(7)
    grads = []
    for lib in (torch, tj):
        x = lib.tensor(x0, requires_grad=True)
        g, = lib.autograd.grad((x.unfold(0, 3, 1) ** 3).sum(), x, create_graph=True)
        g.sum().backward()
        grads.append(x.grad.numpy())
        assert tuple(lib.tensor(3.).unfold(0, 1, 1).shape) == (1,)
        assert tuple(lib.arange(5.).unfold(0, 2, 3).shape) == (2, 2)
    np.testing.assert_allclose(grads[1], grads[0])
    with pytest.raises(Exception, match="size"):
        tj.arange(5.).unfold(0, 6, 1)
    with pytest.raises(ValueError, match="step"):
        tj.arange(5.).unfold(0, 2, 0)
