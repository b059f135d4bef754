"""nn.LSTMCell's gate math as one eager node (nn/recurrent_grad.py `lstm_cell_gates`): values
and gradients of a cell stepped by a Python loop against PyTorch's, with the same weights by
state_dict name; second derivatives (create_graph) through the node; the traced path."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.nn import recurrent_grad

torch = pytest.importorskip("torch")


def _cells(dtype):
    t_cell = torch.nn.LSTMCell(5, 7).to(dtype)
    j_cell = tj.nn.LSTMCell(5, 7)
    if dtype == torch.float64:
        j_cell.double()
    j_cell.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t_cell.state_dict().items()})
    return t_cell, j_cell


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.float64, 1e-13)])
def test_stepped_cell_matches_pytorch(dtype, tol):
    rng = np.random.default_rng(0)
    t_cell, j_cell = _cells(dtype)
    x = rng.standard_normal((6, 3, 5)).astype(np.float32 if dtype == torch.float32 else np.float64)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    t_state = j_state = None
    t_out, j_out = [], []
    for t in range(6):
        t_state = t_cell(tx[t], t_state)
        j_state = j_cell(jx[t], j_state)
        assert j_state[0].grad_fn.name() != "MulBackward0"   # one node for the gate math
        t_out.append(t_state[0] + 0.5 * t_state[1])
        j_out.append(j_state[0] + 0.5 * j_state[1])
    np.testing.assert_allclose(tj.stack(j_out).detach().numpy(), torch.stack(t_out).detach().numpy(),
                               rtol=tol, atol=tol)
    w = rng.standard_normal((6, 3, 7))
    (torch.stack(t_out) * torch.tensor(w, dtype=dtype)).sum().backward()
    (tj.stack(j_out) * tj.tensor(w.astype(x.dtype))).sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=10 * tol, atol=10 * tol)
    j_params = dict(j_cell.named_parameters())
    for name, p in t_cell.named_parameters():
        np.testing.assert_allclose(j_params[name].grad.numpy(), p.grad.numpy(), rtol=10 * tol,
                                   atol=10 * tol, err_msg=name)


def test_only_one_output_used_and_no_grad():
    rng = np.random.default_rng(1)
    gates = rng.standard_normal((4, 12))
    c = rng.standard_normal((4, 3))
    for pick in (0, 1):
        tg, tc = torch.tensor(gates, requires_grad=True), torch.tensor(c, requires_grad=True)
        jg, jc = tj.tensor(gates, requires_grad=True), tj.tensor(c, requires_grad=True)
        i, f, g, o = tg.chunk(4, 1)
        t_c = torch.sigmoid(f) * tc + torch.sigmoid(i) * torch.tanh(g)
        t_h = torch.sigmoid(o) * torch.tanh(t_c)
        (t_h, t_c)[pick].sum().backward()
        recurrent_grad.lstm_cell_gates(jg, jc)[pick].sum().backward()
        np.testing.assert_allclose(jg.grad.numpy(), tg.grad.numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(jc.grad.numpy(), tc.grad.numpy(), rtol=1e-12, atol=1e-14)
    with tj.no_grad():
        h, c2 = recurrent_grad.lstm_cell_gates(tj.tensor(gates), tj.tensor(c))
    assert h.grad_fn is None and h.shape == (4, 3) and c2.shape == (4, 3)


def test_second_derivative_matches_pytorch():
    rng = np.random.default_rng(2)
    gates = rng.standard_normal((2, 8))
    c = rng.standard_normal((2, 2))
    tg, tc = torch.tensor(gates, requires_grad=True), torch.tensor(c, requires_grad=True)
    jg, jc = tj.tensor(gates, requires_grad=True), tj.tensor(c, requires_grad=True)
    i, f, g, o = tg.chunk(4, 1)
    t_c = torch.sigmoid(f) * tc + torch.sigmoid(i) * torch.tanh(g)
    t_h = torch.sigmoid(o) * torch.tanh(t_c)
    (t_dg,) = torch.autograd.grad((t_h * t_c).sum(), tg, create_graph=True)
    j_h, j_c = recurrent_grad.lstm_cell_gates(jg, jc)
    (j_dg,) = tj.autograd.grad((j_h * j_c).sum(), jg, create_graph=True)
    np.testing.assert_allclose(j_dg.detach().numpy(), t_dg.detach().numpy(), rtol=1e-12, atol=1e-14)
    (t_dg ** 2).sum().backward()
    (j_dg ** 2).sum().backward()
    np.testing.assert_allclose(jg.grad.numpy(), tg.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jc.grad.numpy(), tc.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_compiled_cell_loop_matches_eager():
    rng = np.random.default_rng(3)
    _, j_cell = _cells(torch.float32)
    x = tj.tensor(rng.standard_normal((4, 3, 5)).astype(np.float32))

    def run(inp):
        state = None
        for t in range(4):
            state = j_cell(inp[t], state)
        return state[0].sum() + state[1].sum()

    want = run(x)
    want.backward()
    grads = {n: p.grad.clone() for n, p in j_cell.named_parameters()}
    j_cell.zero_grad()
    got = tj.compile(run)(x)
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    for n, p in j_cell.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[n].numpy(), rtol=1e-4, atol=1e-6, err_msg=n)


def _torch_cell(tg, tc):
    i, f, g, o = tg.chunk(4, -1)
    t_c = torch.sigmoid(f) * tc + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(t_c), t_c


@pytest.mark.parametrize("case", ["strided", "unbatched", "empty", "saturated"])
def test_layouts_and_edge_cases_match_pytorch(case):
    rng = np.random.default_rng(3)
    n = {"unbatched": (), "empty": (0,)}.get(case, (5,))
    gates = rng.standard_normal(n + (12,)) * (60.0 if case == "saturated" else 1.0)
    c = rng.standard_normal(n + (3,))
    w_h, w_c = rng.standard_normal(n + (3,)), rng.standard_normal(n + (3,))
    tg, tc = torch.tensor(gates, requires_grad=True), torch.tensor(c, requires_grad=True)
    jg, jc = tj.tensor(gates, requires_grad=True), tj.tensor(c, requires_grad=True)
    jg_in, jc_in = jg, jc
    if case == "strided":   # operands that are transposed views
        jg_in = tj.tensor(np.ascontiguousarray(gates.T), requires_grad=True)
        jc_in = tj.tensor(np.ascontiguousarray(c.T), requires_grad=True)
        jg, jc = jg_in.t(), jc_in.t()
    t_h, t_c = _torch_cell(tg, tc)
    j_h, j_c = recurrent_grad.lstm_cell_gates(jg, jc)
    np.testing.assert_allclose(j_h.detach().numpy(), t_h.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(j_c.detach().numpy(), t_c.detach().numpy(), rtol=1e-12, atol=1e-14)
    # a summed h: its cotangent arrives broadcast (a zero-stride view)
    (t_h.sum() + (t_c * torch.tensor(w_c)).sum() + (t_h * torch.tensor(w_h)).sum()).backward()
    (j_h.sum() + (j_c * tj.tensor(w_c)).sum() + (j_h * tj.tensor(w_h)).sum()).backward()
    dg, dc = jg_in.grad.numpy(), jc_in.grad.numpy()
    if case == "strided":
        dg, dc = dg.T, dc.T
    np.testing.assert_allclose(dg, tg.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dc, tc.grad.numpy(), rtol=1e-12, atol=1e-14)
