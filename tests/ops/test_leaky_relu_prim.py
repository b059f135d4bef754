"""LeakyReLU as one primitive each way (ops/leaky_relu_prim.py): values and gradients
bitwise PyTorch's (signed zeros, infinities and nan included), for slopes below, at and
above 1; the in-place module; second derivatives; the compiled path."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import InplaceModifiedError
from tracejit.ops import leaky_relu_prim

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _input(shape, dtype, rng):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    return x


@pytest.mark.parametrize("shape", [(5, 7), (16, 32, 8, 8)])
@pytest.mark.parametrize("slope", [0.2, 0.01, 0.0, 1.0, 1.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_and_gradients_bitwise_pytorch(shape, slope, dtype):
    rng = np.random.default_rng(int(slope * 10) + len(shape))
    x = _input(shape, dtype, rng)
    g = rng.standard_normal(shape).astype(dtype)
    g.reshape(-1)[6] = -0.0
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    t_out, j_out = TF.leaky_relu(tx, slope), tj.nn.functional.leaky_relu(jx, slope)
    assert j_out.grad_fn.name() == "LeakyReluBackward0"
    np.testing.assert_array_equal(j_out.detach().numpy().view(np.uint8), t_out.detach().numpy().view(np.uint8))
    t_out.backward(torch.tensor(g))
    j_out.backward(tj.tensor(g))
    np.testing.assert_array_equal(jx.grad.numpy().view(np.uint8), tx.grad.numpy().view(np.uint8))


def test_negative_slope_and_integers():
    x = np.array([-2.0, -0.5, 0.0, 3.0], np.float32)
    got = tj.nn.functional.leaky_relu(tj.tensor(x, requires_grad=True), -0.5)
    np.testing.assert_array_equal(got.detach().numpy(), TF.leaky_relu(torch.tensor(x), -0.5).numpy())
    assert got.grad_fn.name() != "LeakyReluBackward0"        # the composite: needs x itself
    with pytest.raises(NotImplementedError):   # as PyTorch: no integer kernel
        TF.leaky_relu(torch.tensor([-3, 0, 4]), 0.5)
    with pytest.raises(NotImplementedError, match="leaky_relu: expected input .* got int64"):
        tj.nn.functional.leaky_relu(tj.tensor([-3, 0, 4]), 0.5)


def test_in_place_module_matches_pytorch():
    rng = np.random.default_rng(1)
    t_net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LeakyReLU(0.2, inplace=True),
                                torch.nn.Linear(5, 3), torch.nn.LeakyReLU(0.2, inplace=True))
    j_net = tj.nn.Sequential(tj.nn.Linear(6, 5), tj.nn.LeakyReLU(0.2, inplace=True),
                             tj.nn.Linear(5, 3), tj.nn.LeakyReLU(0.2, inplace=True))
    j_net.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t_net.state_dict().items()})
    x = rng.standard_normal((8, 6)).astype(np.float32)
    t_out, j_out = t_net(torch.tensor(x)), j_net(tj.tensor(x))
    # (float32 through two products: one ulp of a sum order, which the GEMM's choice may change)
    np.testing.assert_allclose(j_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-6, atol=1e-6)
    t_out.pow(2).sum().backward()
    j_out.pow(2).sum().backward()
    j_params = dict(j_net.named_parameters())
    for name, p in t_net.named_parameters():
        np.testing.assert_allclose(j_params[name].grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_second_derivative_matches_pytorch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5))
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    (t_g,) = torch.autograd.grad((TF.leaky_relu(tx, 0.3) ** 3).sum(), tx, create_graph=True)
    (j_g,) = tj.autograd.grad((tj.nn.functional.leaky_relu(jx, 0.3) ** 3).sum(), jx, create_graph=True)
    np.testing.assert_allclose(j_g.detach().numpy(), t_g.detach().numpy(), rtol=1e-12)
    t_g.sum().backward()
    j_g.sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    gy = leaky_relu_prim.leaky_relu_backward(tj.ones(3), tj.tensor([1.0, -1.0, 0.0]), 0.3)
    assert gy.tolist() == pytest.approx([1.0, 0.3, 0.3])


def test_compiled_matches_eager():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 7)).astype(np.float32)

    def f(a):
        return (tj.nn.functional.leaky_relu(a * 2.0, 0.2) * a).sum()

    ja = tj.tensor(x, requires_grad=True)
    want = f(ja)
    want.backward()
    want_grad = ja.grad.numpy().copy()
    ja.grad = None
    got = tj.compile(f)(ja)
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(ja.grad.numpy(), want_grad, rtol=1e-6, atol=1e-7)


def test_the_gradient_reads_the_input_as_pytorchs():
    # out-of-place leaky_relu saves its input: the output may be written in place before
    # backward, the input may not (both as PyTorch)
    a = np.random.default_rng(1).standard_normal((4, 5))
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        y = m.nn.functional.leaky_relu(x * 1.0, 0.1)
        y.mul_(2.0)
        (y * 1.5).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    x = tj.tensor(a, requires_grad=True)
    h = x * 1.0
    y = tj.nn.functional.leaky_relu(h, 0.1)
    h.mul_(2.0)
    with pytest.raises(InplaceModifiedError):
        y.sum().backward()
