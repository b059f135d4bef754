"""The eager recurrent layers' deferred hidden-weight gradient (one GEMM over all steps)
against PyTorch: first and second order, retained graphs, steps the loss does not reach,
frozen weights."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.nn.recurrent_grad import DeferredHiddenGrad

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


def test_frozen_hidden_weights_and_no_grad_use_plain_ops():
    m, t = _pair("gru")
    m.weight_hh_l0.requires_grad_(False)
    m.bias_hh_l0.requires_grad_(False)
    t.weight_hh_l0.requires_grad_(False)
    t.bias_hh_l0.requires_grad_(False)
    assert not DeferredHiddenGrad(m.weight_hh_l0, m.bias_hh_l0).active
    xv = _x(2)
    m(tj.tensor(xv))[0].sum().backward()
    t(torch.tensor(xv))[0].sum().backward()
    assert m.weight_hh_l0.grad is None
    np.testing.assert_allclose(m.weight_ih_l0.grad.numpy(), t.weight_ih_l0.grad.numpy(), rtol=1e-10)
    with tj.no_grad():
        assert not DeferredHiddenGrad(m.weight_ih_l0, None).active


def test_one_weight_gradient_gemm_per_layer_and_direction():
    """The point of the deferred gradient: W_hh's gradient is one matmul, not one per step
    (RNN; the eager LSTM and GRU run their whole time loop as one op, tests/nn/test_lstm_layer.py
    and test_gru_layer.py)."""
    from tracejit.ops import linalg
    m, _ = _pair("rnn")
    out = m(tj.tensor(_x(3, (7, 2, 3))))[0].sum()
    calls = []
    orig = linalg.MATMUL.impl
    linalg.MATMUL.impl = lambda xp, a, b: calls.append((a.shape, b.shape)) or orig(xp, a, b)
    try:
        out.backward()
    finally:
        linalg.MATMUL.impl = orig
    # per step: dh = dgates @ W_hh (6: h_0 is a constant zero state); once: dW_hh over
    # the 7*2 stacked rows, and dW_ih (x needs no gradient)
    assert sum(1 for a, b in calls if a == (2, 4) and b == (4, 4)) == 6
    assert ((4, 14), (14, 4)) in calls
    assert len(calls) == 6 + 2, calls


def test_a_pass_that_skips_the_weights_leaves_nothing_stale_for_the_next():
    """autograd.grad of the input alone (the weights' node does not run) over a retained
    graph reaching both steps, then a backward reaching only the first step: W's gradient
    must be that of the second loss alone (not the first pass's step-2 gradient too)."""
    r = np.random.default_rng(5)
    wv, bv, hv = r.standard_normal((4, 4)), r.standard_normal(4), r.standard_normal((2, 4))

    def run(proj_of):
        w, b = tj.tensor(wv, requires_grad=True), tj.tensor(bv, requires_grad=True)
        h0 = tj.tensor(hv, requires_grad=True)
        proj = proj_of(w, b)
        h1 = proj(h0)
        h2 = proj(tj.tanh(h1))
        g0 = tj.autograd.grad((h2 * h2).sum(), [h0], retain_graph=True)[0]
        (h1 * 3.0).sum().backward()
        return g0.numpy(), w.grad.numpy(), b.grad.numpy()

    deferred = run(lambda w, b: DeferredHiddenGrad(w, b))
    plain = run(lambda w, b: (lambda h: tj.nn.functional.linear(h, w, b)))
    for a, e in zip(deferred, plain):
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-14)


def test_the_deferred_state_holds_no_tensors_between_passes():
    """Between backward passes the state the steps share is empty (it only carries the
    steps' (h, dgates) from their backwards to the weights' node within one pass)."""
    h0 = tj.tensor(_x(6, (2, 4)), requires_grad=True)
    w = tj.tensor(_x(7, (4, 4)), requires_grad=True)
    proj = DeferredHiddenGrad(w, None)
    y = proj(tj.tanh(proj(h0)))
    assert proj.pending.steps == []
    y.sum().backward()
    assert proj.pending.steps == [] and w.grad is not None
