"""Activation modules against PyTorch's (values, gradients, inplace=, PReLU's parameter)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn

torch = pytest.importorskip("torch", reason="activation modules are checked against PyTorch")

CASES = [("ELU", {}), ("ELU", {"alpha": 0.3}), ("SELU", {}), ("CELU", {"alpha": 1.5}), ("Mish", {}),
         ("Hardtanh", {"min_val": -0.5, "max_val": 2.0}), ("ReLU6", {}), ("Hardsigmoid", {}),
         ("Hardswish", {}), ("LeakyReLU", {"negative_slope": 0.2}), ("SiLU", {}), ("Softplus", {"beta": 2.0})]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_module_matches_torch(name, kw):
    x = np.random.default_rng(0).uniform(-8, 8, (4, 5))
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    yt, yj = getattr(torch.nn, name)(**kw)(xt), getattr(nn, name)(**kw)(xj)
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    (yt ** 2).sum().backward()
    (yj ** 2).sum().backward()
    # PyTorch's hardsigmoid backward uses the float32 constant 1.0f / 6.0f even in float64.
    rtol = 1e-7 if name == "Hardsigmoid" else 1e-9
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name", ["ELU", "SELU", "Mish", "Hardtanh", "ReLU6", "Hardswish", "LeakyReLU",
                                  "SiLU", "CELU", "Hardsigmoid"])
def test_inplace_writes_input(name):
    x = tj.tensor([-2.0, -0.5, 0.5, 7.0])
    expect = getattr(nn, name)()(x).numpy()
    y = getattr(nn, name)(inplace=True)(x)
    np.testing.assert_allclose(x.numpy(), expect)
    np.testing.assert_allclose(y.numpy(), expect)


@pytest.mark.parametrize("num,shape", [(1, (4, 3, 2)), (3, (4, 3, 2)), (3, (2, 3)), (1, (5,))])
def test_prelu(num, shape):
    t = torch.nn.PReLU(num).double()
    m = nn.PReLU(num, dtype="float64")
    assert list(m.state_dict()) == ["weight"] and np.allclose(m.weight.detach().numpy(), 0.25)
    with torch.no_grad():
        t.weight.uniform_(-0.5, 0.5)
    m.load_state_dict({"weight": tj.tensor(t.weight.detach().numpy())})
    x = np.random.default_rng(1).standard_normal(shape)
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    yt, yj = t(xt), m(xj)
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-12)
    (yt ** 3).sum().backward()
    (yj ** 3).sum().backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-10)


def test_prelu_channel_mismatch_names_shapes():
    with pytest.raises(tj.errors.ShapeError, match=r"weight has 3 parameters but input of shape \(2, 4\)"):
        nn.PReLU(3)(tj.randn(2, 4))


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_inplace_inside_a_graph_matches_torch_gradient(name, kw):
    # the input is an intermediate result (a layer's output, as after a BatchNorm): its
    # memory is overwritten while the activation's gradient still needs the old values
    if name == "Softplus":
        pytest.skip("Softplus has no inplace option")
    x = np.random.default_rng(1).uniform(-8, 8, (4, 5))
    grads = []
    for lib, mod in ((torch, torch.nn), (tj, nn)):
        leaf = lib.tensor(x, requires_grad=True)
        h = leaf * 1.5
        y = getattr(mod, name)(**kw, inplace=True)(h)
        assert y is h
        (y ** 2).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("fn,args", [("threshold", (0.5, -1.0)), ("leaky_relu", (0.1,)), ("silu", ()),
                                     ("rrelu", (0.1, 0.3, False)), ("hardtanh", (-2.0, 3.0)),
                                     ("relu6", ()), ("elu", (0.7,)), ("hardswish", ()),
                                     ("hardsigmoid", ()), ("mish", ()), ("celu", (2.0,)), ("selu", ())])
def test_functional_inplace_inside_a_graph_matches_torch(fn, args):
    x = np.random.default_rng(2).uniform(-6, 6, (3, 4))
    grads = []
    for lib in (torch, tj):
        leaf = lib.tensor(x, requires_grad=True)
        h = leaf * 1.5
        y = getattr(lib.nn.functional, fn)(h, *args, inplace=True)
        (y * lib.tensor(x)).sum().backward()
        grads.append((y.detach().numpy(), leaf.grad.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("fn", ["dropout", "dropout1d", "alpha_dropout"])
def test_inplace_dropout_inside_a_graph_keeps_the_gradient(fn):
    x = np.random.default_rng(3).uniform(-2, 2, (4, 6, 5))
    leaf = tj.tensor(x, requires_grad=True)
    h = leaf * 2.0
    y = getattr(tj.nn.functional, fn)(h, 0.5, True, inplace=True)
    assert y is h
    y.sum().backward()
    # the gradient is 2 * the scale where a unit was kept and 0 where it was dropped
    g = leaf.grad.numpy()
    values = np.unique(g)
    assert len(values) == 2 and values[0] == 0 and values[1] > 0
    if fn != "alpha_dropout":
        np.testing.assert_array_equal(y.detach().numpy() == 0, g == 0)


@pytest.mark.parametrize("name, kw", [("elu", {}), ("elu", {"alpha": 2.0}), ("celu", {"alpha": 0.5}), ("selu", {})])
def test_elu_family_gradient_at_zero_is_pytorchs(name, kw):
    res = []
    for lib in (torch, tj):
        x = lib.tensor([0.0, -0.0, 1.0, -1.0], dtype=lib.float64, requires_grad=True)
        getattr(lib.nn.functional, name)(x, **kw).sum().backward()
        res.append(x.grad.numpy())
    np.testing.assert_allclose(res[1], res[0], rtol=1e-12)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("n", [6, 40000])   # (small, and large enough for the eager fast path)
def test_hardtanh_and_relu6_gradient_is_zero_at_the_bounds_unlike_clamp(inplace, n):
    vals = np.resize(np.array([-1.0, 1.0, 0.0, 6.0, -2.0, 7.0, 0.5]), n)
    res = []
    for lib in (torch, tj):
        F = lib.nn.functional
        x = lib.tensor(vals, requires_grad=True)
        h, r, c = x * 1.0, x * 1.0, x * 1.0
        (F.hardtanh(h, inplace=inplace) + F.relu6(r, inplace=inplace) * 2 + c.clamp(-1, 1) * 4).sum().backward()
        res.append(x.grad.numpy())
    np.testing.assert_array_equal(res[1], res[0])


def test_relu6_gradient_at_the_bounds_when_compiled():
    x0 = np.array([0.0, 3.0, 1.5, 4.0, -1.0], np.float32)
    x = tj.tensor(x0, requires_grad=True)
    tj.compile(lambda x: tj.nn.functional.relu6(x * 2.0))(x).sum().backward()
    xt = torch.tensor(x0, requires_grad=True)
    torch.nn.functional.relu6(xt * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
