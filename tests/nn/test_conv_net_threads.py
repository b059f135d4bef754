"""A small conv net's training step on any thread count: `tracejit.set_num_threads(n)` for
n = 1, 2, 4 (more than this machine's cores run too) gives the same bits where the sum
order does not depend on the count (BatchNorm's per-channel folds, ReLU) and close values
where it does (the convolutions' products and weight gradients, summed per share), and
PyTorch's values (weights copied by state_dict name)."""
import time

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="the step is checked against PyTorch")


def _net(m):
    return m.nn.Sequential(m.nn.Conv2d(3, 16, 3, padding=1), m.nn.BatchNorm2d(16), m.nn.ReLU(),
                           m.nn.Conv2d(16, 32, 3, stride=2, padding=1), m.nn.BatchNorm2d(32), m.nn.ReLU(),
                           m.nn.Conv2d(32, 32, 1), m.nn.Flatten(), m.nn.Linear(32 * 16 * 16, 10))


def _step(net, x, y):
    """The loss and every gradient, as numpy arrays."""
    net.zero_grad()
    loss = tj.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    return [loss.detach().numpy()] + [p.grad.numpy() for p in net.parameters()]


def _bn_relu(bn, x, g):
    """ReLU(BatchNorm(x)) in training mode and the gradients of its sum with g, as numpy."""
    x.grad = None
    bn.zero_grad()
    out = tj.relu(bn(x))
    out.backward(g)
    return [out.detach().numpy(), x.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy()]


def test_a_conv_nets_step_is_the_same_on_1_2_and_4_threads(thread_counts_back, monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")    # kernels on disk load at their first call
    from tracejit.compiler.cpu.kernels import loader, vectorized
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    t = _net(torch)
    ours = _net(tj)
    ours.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    xj, yj = tj.tensor(x), tj.tensor(y)
    bn = tj.nn.BatchNorm2d(16)
    h = tj.tensor(rng.standard_normal((16, 16, 32, 32)).astype(np.float32), requires_grad=True)
    g = tj.tensor(rng.standard_normal((16, 16, 32, 32)).astype(np.float32))
    for n in (1, 2, 4):     # every kernel variant the counts ask for, then loaded
        tj.set_num_threads(n)
        _step(ours, xj, yj), _bn_relu(bn, h, g)
    vectorized.settle(120.0)
    loader.settle(time.monotonic() + 120.0)
    steps, norms = {}, {}
    for n in (1, 2, 4):
        tj.set_num_threads(n)
        steps[n], norms[n] = _step(ours, xj, yj), _bn_relu(bn, h, g)
    for n in (2, 4):
        for got, want in zip(norms[n], norms[1]):
            np.testing.assert_array_equal(got, want, err_msg=f"BatchNorm + ReLU, {n} threads")
        for got, want in zip(steps[n], steps[1]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"conv net, {n} threads")
    t.zero_grad()
    loss = torch.nn.functional.cross_entropy(t(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    want = [loss.detach().numpy()] + [p.grad.numpy() for p in t.parameters()]
    for got, w in zip(steps[2], want):
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-4)
