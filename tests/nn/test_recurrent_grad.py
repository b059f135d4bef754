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
