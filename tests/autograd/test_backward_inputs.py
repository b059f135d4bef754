"""``backward(inputs=...)`` against PyTorch: gradients accumulate into the given tensors'
``.grad`` alone (leaves or not), in place unless create_graph, and bad inputs are refused."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")
A = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)


def _accumulate(lib):
    x = lib.tensor(A, requires_grad=True)
    y = lib.tensor(A, requires_grad=True)
    h = x * y
    out = h.exp().sum()
    out.backward(inputs=[y], retain_graph=True)
    assert x.grad is None
    out.backward(inputs=y, retain_graph=True)
    lib.autograd.backward([out * 2], inputs=[h, x])
    return [y.grad, x.grad, h.grad]


def _create_graph(lib):
    x = lib.tensor(A, requires_grad=True)
    (x ** 3).sum().backward(inputs=[x], create_graph=True)
    g = x.grad
    g.sum().backward(inputs=[x])   # in place into x.grad, which is g
    return [g, x.grad]


@pytest.mark.parametrize("program", [_accumulate, _create_graph])
def test_backward_inputs_matches_torch(program):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (PyTorch's create_graph reference-cycle warning)
        want = program(torch)
    for a, b in zip(program(tj), want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5)


def test_backward_inputs_refuses_empty_and_non_grad_inputs():
    x = tj.tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        (x * 2).sum().backward(inputs=[])
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 2).sum().backward(inputs=[tj.tensor(A)])
    assert x.grad is None


def _non_leaf_input(lib):
    x = lib.tensor(A, requires_grad=True)
    n = x * 2
    m = x * 3
    m.retain_grad()
    out = (n * m).sum()
    out.backward(inputs=[n, m], retain_graph=True)
    got = [n.retains_grad, m.retains_grad, x.grad is None, n.grad.clone(), m.grad.clone()]
    out.backward(retain_graph=True)     # n keeps retaining its gradient, as after retain_grad()
    got += [n.grad.clone(), m.grad.clone(), x.grad.clone()]
    out.backward(inputs=[n], create_graph=True)
    return got + [n.grad.detach(), n.grad.requires_grad]


def test_a_non_leaf_input_retains_its_gradient_as_in_torch():
    want, got = _non_leaf_input(torch), _non_leaf_input(tj)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        if isinstance(w, torch.Tensor):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
        else:
            assert g == w
