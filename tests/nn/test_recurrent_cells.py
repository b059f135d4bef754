"""The single-step cells (nn.LSTMCell, GRUCell, RNNCell) against PyTorch with the same
weights: outputs and every gradient, float32 and float64, batch 1 and odd sizes, the
state omitted or given, with and without biases."""
import numpy as np
import pytest
import torch

import tracejit as tj
from tracejit import nn

CELLS = [(nn.LSTMCell, torch.nn.LSTMCell, {}), (nn.GRUCell, torch.nn.GRUCell, {}),
         (nn.RNNCell, torch.nn.RNNCell, {"nonlinearity": "tanh"}),
         (nn.RNNCell, torch.nn.RNNCell, {"nonlinearity": "relu"})]
TOL = {"float32": (2e-5, 2e-6), "float64": (1e-10, 1e-12)}


def _pair(cell, tcell, kw, I, H, bias, dtype):
    torch.manual_seed(1)
    t = tcell(I, H, bias=bias, **kw).to(getattr(torch, dtype))
    m = cell(I, H, bias=bias, dtype=dtype, **kw)
    for name, p in t.named_parameters():
        getattr(m, name).data = tj.tensor(p.detach().numpy().copy())
    return m, t


def _step(mod, T, x, state, steps):
    """`steps` steps of the cell on x (N, I) -> the sum of squares of every output."""
    total = 0
    for _ in range(steps):
        state = mod(x, state)
        outs = state if isinstance(state, tuple) else (state,)
        total = total + sum((o * o).sum() for o in outs)
    return total


@pytest.mark.parametrize("cell,tcell,kw", CELLS, ids=["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("N,I,H,bias,with_state", [(1, 3, 5, True, False), (7, 5, 3, True, True),
                                                   (3, 1, 9, False, True), (5, 4, 6, True, False)])
def test_cell_values_and_gradients_match_torch(cell, tcell, kw, dtype, N, I, H, bias, with_state):
    m, t = _pair(cell, tcell, kw, I, H, bias, dtype)
    rng = np.random.default_rng(N * 100 + H)
    xs = rng.standard_normal((N, I)).astype(dtype)
    lstm = cell is nn.LSTMCell
    states = [rng.standard_normal((N, H)).astype(dtype) for _ in range(2 if lstm else 1)]

    def run(lib, mod):
        x = lib.tensor(xs, requires_grad=True)
        st = [lib.tensor(s, requires_grad=True) for s in states]
        state = (tuple(st) if lstm else st[0]) if with_state else None
        loss = _step(mod, lib, x, state, 3)
        loss.backward()
        return x, st, loss

    xj, sj, lj = run(tj, m)
    xt, st, lt = run(torch, t)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(lj.item(), lt.item(), rtol=rtol * 10)
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol * 10)
    if with_state:
        for a, b in zip(sj, st):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=atol * 10)
    tp = dict(t.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=rtol * 10, atol=atol * 10,
                                   err_msg=name)


@pytest.mark.parametrize("cell,tcell,kw", CELLS[:2], ids=["lstm", "gru"])
def test_unbatched_cell_matches_torch(cell, tcell, kw):
    m, t = _pair(cell, tcell, kw, 4, 3, True, "float64")
    x = np.random.default_rng(0).standard_normal(4)
    oj = m(tj.tensor(x))
    ot = t(torch.tensor(x))
    oj, ot = (oj, ot) if isinstance(oj, tuple) else ((oj,), (ot,))
    for a, b in zip(oj, ot):
        assert tuple(a.shape) == tuple(b.shape) == (3,)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_lstm_cell_step_is_one_graph_node():
    """An eager LSTMCell step records one node: the layer's primitives on a one-step
    sequence, called on the arrays."""
    m = nn.LSTMCell(3, 4, dtype="float64")
    x = tj.randn(2, 3, dtype=tj.float64)
    h, c = m(x)
    assert h.grad_fn is c.grad_fn is not None
    assert {n[0] is not None and type(n[0]).__name__ for n in h.grad_fn.next_functions} <= {
        "AccumulateGrad", False}


@pytest.mark.parametrize("cell,tcell,kw", CELLS[:2], ids=["lstm", "gru"])
def test_cell_second_derivative_matches_torch(cell, tcell, kw):
    """create_graph through a cell step: the gradient's own gradient, as PyTorch's."""
    m, t = _pair(cell, tcell, kw, 3, 4, True, "float64")
    rng = np.random.default_rng(5)
    xs, hs = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))

    def run(lib, mod):
        x, h = lib.tensor(xs, requires_grad=True), lib.tensor(hs, requires_grad=True)
        out = mod(x, (h, h * 0.5) if cell is nn.LSTMCell else h)
        out = out if isinstance(out, tuple) else (out,)
        loss = sum((o * o * o).sum() for o in out)
        (dx,) = lib.autograd.grad(loss, x, create_graph=True)
        (dx ** 2).sum().backward()
        return dx, h.grad, mod.weight_hh.grad

    for a, b in zip(run(tj, m), run(torch, t)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12)
