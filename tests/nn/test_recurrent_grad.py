"""The eager recurrent layers' gradients (each layer's time loop is one op each way:
ops/rnn_layer.py, lstm_layer.py, gru_layer.py) against PyTorch: first and second order,
retained graphs, steps the loss does not reach, frozen weights."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn

torch = pytest.importorskip("torch", reason="the recurrent layers are checked against PyTorch")

PAIRS = {"lstm": (nn.LSTM, torch.nn.LSTM), "gru": (nn.GRU, torch.nn.GRU), "rnn": (nn.RNN, torch.nn.RNN)}


def _pair(kind, **kw):
    ours, theirs = PAIRS[kind]
    torch.manual_seed(1)
    t = theirs(3, 4, **kw).double()
    m = ours(3, 4, dtype="float64", **kw)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return m, t


def _x(seed=0, shape=(5, 2, 3)):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_second_order_through_the_hidden_weights_matches_torch(kind):
    m, t = _pair(kind, num_layers=2)
    xv = _x()
    xj, xt = tj.tensor(xv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    lj = (m(xj)[0] ** 2).sum()
    lt = (t(xt)[0] ** 2).sum()
    gj = tj.autograd.grad(lj, [m.weight_hh_l0, xj], create_graph=True)
    gt = torch.autograd.grad(lt, [t.weight_hh_l0, xt], create_graph=True)
    for a, b in zip(gj, gt):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12)
    # a gradient penalty: differentiate |dL/dW_hh|^2 + |dL/dx|^2 again
    pj = (gj[0] ** 2).sum() + (gj[1] ** 2).sum()
    pt = (gt[0] ** 2).sum() + (gt[1] ** 2).sum()
    pj.backward()
    pt.backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-11)
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), getattr(t, name).grad.numpy(), rtol=1e-8, atol=1e-11,
                                   err_msg=name)


def test_retained_graph_and_steps_the_loss_does_not_reach():
    m, t = _pair("lstm", bidirectional=True)
    xv = _x(1)
    oj, ot = m(tj.tensor(xv))[0], t(torch.tensor(xv))[0]
    # only step 1's output: later forward steps (and earlier reverse ones) get no gradient
    lj, lt = oj[1].sum(), ot[1].sum()
    lj.backward(retain_graph=True)
    lj.backward()                                    # twice over the retained graph: 2x
    lt.backward(retain_graph=True)
    lt.backward()
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), getattr(t, name).grad.numpy(), rtol=1e-10, atol=1e-13,
                                   err_msg=name)


@pytest.mark.parametrize("kind", ["gru", "rnn"])
def test_frozen_hidden_weights(kind):
    m, t = _pair(kind)
    m.weight_hh_l0.requires_grad_(False)
    m.bias_hh_l0.requires_grad_(False)
    t.weight_hh_l0.requires_grad_(False)
    t.bias_hh_l0.requires_grad_(False)
    xv = _x(2)
    m(tj.tensor(xv))[0].sum().backward()
    t(torch.tensor(xv))[0].sum().backward()
    assert m.weight_hh_l0.grad is None and m.bias_hh_l0.grad is None
    np.testing.assert_allclose(m.weight_ih_l0.grad.numpy(), t.weight_ih_l0.grad.numpy(), rtol=1e-10)


def test_one_weight_gradient_gemm_per_layer_and_direction(monkeypatch):
    """An RNN layer's backward is one op: per step one GEMM dh = W_hh^T dpre, and W_hh's
    gradient one GEMM over all steps (as the LSTM's and GRU's: tests/nn/test_lstm_layer.py,
    test_gru_layer.py). Counted on the numpy form (the whole-loop kernel, compiler/cpu/kernels/rnn_kernels.py,
    makes the per-step GEMMs inside numba: tests/ops/test_rnn_kernels.py)."""
    from tracejit.ops import lstm_prim
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    m, _ = _pair("rnn")
    out = m(tj.tensor(_x(3, (7, 2, 3))))[0].sum()
    calls = []
    orig = lstm_prim._matmul
    counted = lambda xp, a, b: calls.append((a.shape, b.shape)) or orig(xp, a, b)   # noqa: E731
    # (the layers' one backward loop, `backward_steps`, and hidden_weight_grad's GEMM)
    monkeypatch.setattr(lstm_prim, "_matmul", counted)
    out.backward()
    assert calls.count(((4, 4), (4, 2))) == 7               # one per step (d h0 included)
    assert calls.count(((4, 14), (14, 4))) == 1             # d W_hh over the 7*2 stacked rows
    assert len(calls) == 8, calls


def test_a_gru_cell_loop_runs_the_layer_kernels_after_wait(monkeypatch):
    """A GRUCell stepped by a short Python loop on x[:, t] (a strided view) asks for the GRU
    layer's kernels each call; its loop ends before a kernel's loader starts (a call a second
    after the first), so ``tj.compiler.wait()`` loads them, and the next loop runs them: no
    step of the numpy form, values as the numpy form's and PyTorch's."""
    from tracejit.compiler.cpu.kernels import loader
    from tracejit.ops import gru_prim
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)        # background loads
    monkeypatch.setattr(loader, "_GO_AFTER_S", 1e9)            # no call starts a loader
    torch.manual_seed(2)
    t = torch.nn.GRUCell(3, 4).double()
    m = nn.GRUCell(3, 4, dtype="float64")
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    xv = _x(4, (2, 6, 3))
    numpy_steps = []
    step, back = gru_prim._gru_step, gru_prim.backward_steps
    monkeypatch.setattr(gru_prim, "_gru_step", lambda *a: numpy_steps.append(1) or step(*a))
    monkeypatch.setattr(gru_prim, "backward_steps", lambda *a: numpy_steps.append(2) or back(*a))

    def run():
        m.zero_grad()
        x = tj.tensor(xv, requires_grad=True)
        h = tj.zeros(2, 4, dtype=tj.float64)
        hs = []
        for i in range(xv.shape[1]):
            h = m(x[:, i], h)
            hs.append(h)
        (tj.stack(hs, 1) ** 2).sum().backward()
        return [a.detach().numpy().copy() for a in (h, x.grad, m.weight_hh.grad, m.weight_ih.grad, m.bias_hh.grad)]

    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    numpy_form = run()
    assert numpy_steps.count(1) == 6 and numpy_steps.count(2) == 6
    monkeypatch.delenv("TRACEJIT_EAGER_KERNELS")
    run()                                       # asks for the kernels
    assert tj.compiler.wait(timeout=600)
    numpy_steps.clear()
    kernels = run()
    assert numpy_steps == []
    for a, b in zip(kernels, numpy_form):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    x = torch.tensor(xv, requires_grad=True)
    h = torch.zeros(2, 4, dtype=torch.float64)
    hs = []
    for i in range(xv.shape[1]):
        h = t(x[:, i], h)
        hs.append(h)
    (torch.stack(hs, 1) ** 2).sum().backward()
    for a, b in zip(kernels, (h, x.grad, t.weight_hh.grad, t.weight_ih.grad, t.bias_hh.grad)):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-12)
