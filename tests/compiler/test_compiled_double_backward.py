"""create_graph=True through a compiled function (create_graph.py): the backward
runs as compiled programs whose outputs are differentiable again, and second derivatives
(gradient penalty, force matching, MAML's outer gradient, Hessian-vector products) are
PyTorch's, eager and compiled, in one capture. Where the backward cannot be differentiated
again in the IR, and for a third order, it is interpreted, with the reason logged."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

R = np.random.default_rng(0)
W1, B1 = R.standard_normal((16, 3)).astype(np.float32) * 0.5, R.standard_normal(16).astype(np.float32) * 0.1
W2, B2 = R.standard_normal((1, 16)).astype(np.float32) * 0.5, R.standard_normal(1).astype(np.float32) * 0.1


def _net(lib):
    net = lib.nn.Sequential(lib.nn.Linear(3, 16), lib.nn.Softplus(), lib.nn.Linear(16, 1))
    net.load_state_dict({k: lib.tensor(v) for k, v in zip(("0.weight", "0.bias", "2.weight", "2.bias"),
                                                           (W1, B1, W2, B2))})
    return net


def _compare(step, compiled_steps=3):
    """`step(lib, net, fn, k)` -> arrays (k seeds its data), for PyTorch eager and tracejit eager
    and compiled."""
    want = [step(torch, *(lambda n: (n, n))(_net(torch)), k) for k in range(compiled_steps)]
    for compiled in (False, True):
        net = _net(tj)
        fn = tj.compile(net) if compiled else net
        for k in range(compiled_steps):
            for a, b in zip(step(tj, net, fn, k), want[k]):
                np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
        if compiled:
            assert fn.cache_stats()["compiles"] == 1
            return fn


def _grads(net):
    return [p.grad.numpy().copy() for p in net.parameters()]


def test_gradient_penalty_matches_torch():
    def step(lib, net, fn, k):   # WGAN-GP's penalty on interpolates
        x0 = np.random.default_rng(k).standard_normal((8, 3)).astype(np.float32) * (k + 1)
        x = lib.tensor(x0, requires_grad=True)
        out = fn(x)
        (g,) = lib.autograd.grad(out, x, grad_outputs=lib.ones_like(out), create_graph=True)
        net.zero_grad()
        pen = ((g.norm(2, dim=1) - 1) ** 2).mean()
        (out.mean() + 10 * pen).backward()
        return [pen.detach().numpy()] + _grads(net)
    fn = _compare(step)
    x = tj.tensor(np.ones((8, 3), np.float32), requires_grad=True)
    (g,) = tj.autograd.grad(fn(x).sum(), x, create_graph=True)
    assert type(g.grad_fn).__name__ == "CompiledNode"   # the backward's own compiled program


def test_forces_loss_matches_torch():
    def step(lib, net, fn, k):   # energy and forces (SchNet's) trained together
        pos = lib.tensor(np.random.default_rng(k).standard_normal((10, 3)).astype(np.float32), requires_grad=True)
        energy = fn(pos).sum()
        forces = -lib.autograd.grad(energy, pos, create_graph=True)[0]
        net.zero_grad()
        loss = (energy - 1.0) ** 2 + ((forces - 0.5) ** 2).mean()
        loss.backward()
        return [forces.detach().numpy()] + _grads(net)
    _compare(step)


def test_maml_outer_gradient_matches_torch():
    def step(lib, net, fn, k):   # two inner SGD steps by functional_call, second order
        xs, xq = (lib.tensor(np.random.default_rng(k).uniform(-2, 2, (2, 6, 3)).astype(np.float32)))
        params = dict(net.named_parameters())
        for _ in range(2):
            loss = lib.func.functional_call(fn, params, (xs,)).pow(2).mean()
            grads = lib.autograd.grad(loss, list(params.values()), create_graph=True)
            params = {n: p - 0.1 * g for (n, p), g in zip(params.items(), grads)}
        net.zero_grad()
        lib.func.functional_call(fn, params, (xq,)).pow(2).mean().backward()
        return _grads(net)
    _compare(step)


def test_hessian_vector_product_matches_torch():
    v = R.standard_normal((5, 3)).astype(np.float32)

    def step(lib, net, fn, k):
        x = lib.tensor(np.random.default_rng(k).standard_normal((5, 3)).astype(np.float32), requires_grad=True)
        (g,) = lib.autograd.grad(fn(x).pow(2).sum(), x, create_graph=True)
        (hv,) = lib.autograd.grad((g * lib.tensor(v)).sum(), x, create_graph=True)
        (third,) = lib.autograd.grad(hv.pow(2).sum(), x)   # and a third order
        return [hv.detach().numpy(), third.numpy()]
    _compare(step)


def _grid_case(seed=1):
    r = np.random.default_rng(seed)
    return r.standard_normal((1, 2, 4, 4)), r.uniform(-1, 1, (1, 3, 3, 2))


def test_a_backward_not_differentiable_in_the_ir_is_interpreted_with_a_reason(caplog, monkeypatch):
    # grid_sample's backward made differentiable eagerly but not in the IR (while tracing)
    from tracejit.ops import sampling
    vjp = sampling.GRID_SAMPLE_BACKWARD.vjp

    def eager_only(u, *a, **k):
        if u._data is None:
            raise NotImplementedError("grid_sample_backward: no IR derivative (test)")
        return vjp(u, *a, **k)
    monkeypatch.setattr(sampling.GRID_SAMPLE_BACKWARD, "vjp", eager_only)
    x0, g0 = _grid_case()
    res = []
    for lib in (torch, tj):
        x = lib.tensor(x0, requires_grad=True)

        def f(a, b):
            return lib.nn.functional.grid_sample(a, b, align_corners=False).pow(2).sum()
        fn = tj.compile(f) if lib is tj else f
        with caplog.at_level(logging.WARNING, logger="tracejit.fallback"):
            (gx,) = lib.autograd.grad(fn(x, lib.tensor(g0)), x, create_graph=True)
        res.append(lib.autograd.grad(gx.pow(3).sum(), x)[0].numpy())
    assert any("interpreted op by op" in r.getMessage() and "no IR derivative (test)" in r.getMessage()
               for r in caplog.records)
    np.testing.assert_allclose(res[1], res[0], rtol=1e-9, atol=1e-9)


def test_a_third_order_is_interpreted_as_eager_autograd(caplog):
    # grid_sample's third derivative through the grid is not defined: as in eager mode the
    # error comes when (and only if) it is taken
    x0, g0 = _grid_case()
    res = []
    for lib in (torch, tj):
        x, grid = lib.tensor(x0), lib.tensor(g0, requires_grad=True)

        def f(a, b):
            return lib.nn.functional.grid_sample(a, b, align_corners=False).pow(2).sum()
        fn = tj.compile(f) if lib is tj else f
        (gg,) = lib.autograd.grad(fn(x, grid), grid, create_graph=True)
        with caplog.at_level(logging.INFO, logger="tracejit.fallback"):
            (h,) = lib.autograd.grad(gg.pow(2).sum(), grid, create_graph=lib is tj)
        res.append(h.detach().numpy())
    assert any("third order" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(res[1], res[0], rtol=1e-9, atol=1e-9)
    with pytest.raises(NotImplementedError, match="derivatives past the second"):
        tj.autograd.grad(h.sum(), grid)
