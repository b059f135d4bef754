"""Captured recurrent layers: an LSTM (GRU) layer is the eager layer's ``lstm_layer``
(``gru_layer``) op and, differentiated, ``lstm_layer_backward`` (``gru_layer_backward``):
ops/lstm_layer.py, ops/gru_layer.py. Compiled gradients equal PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.autodiff import split

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _loss(lib, m, x):
    out, state = m(x)
    h, c = state if isinstance(state, tuple) else (state, state * 0.5)
    return (out * out).sum() + (h * 1.5).sum() + (c * c).sum()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("cfg", [dict(num_layers=2, batch_first=True), dict(bidirectional=True),
                                 dict(bias=False)], ids=["2-layers,batch_first", "bidirectional", "no-bias"])
def test_compiled_lstm_and_gru_gradients_match_torch(cfg, kind):
    tm = getattr(torch.nn, kind)(5, 4, **cfg)
    m = getattr(tj.nn, kind)(5, 4, **cfg)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x0 = np.random.default_rng(3).standard_normal((3, 7, 5)).astype(np.float32)
    tx = torch.tensor(x0, requires_grad=True)
    _loss(torch, tm, tx).backward()
    f = tj.script(lambda x: _loss(tj, m, x))
    for _ in range(2):                        # capture, then the cached program
        for p in m.parameters():
            p.grad = None
        x = tj.tensor(x0, requires_grad=True)
        loss = f(x)
        loss.backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
        for (name, p), tp in zip(m.named_parameters(), tm.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def _fwd_bwd_names(cf) -> tuple:
    """The primitive names of the forward and backward graphs `cf`'s first entry splits into."""
    g = cf.entries[0].graph
    fwd, bwd, _ = split(g, [True] * len(g.inputs))
    return [e.prim.name for e in fwd.eqns], [e.prim.name for e in bwd.eqns]


def test_a_compiled_lstm_layer_is_the_eager_layers_two_ops():
    """Captured, an LSTM layer is one ``lstm_layer`` equation (and ``lstm_layer_states``,
    its h and c rows), differentiated by the record's VJP into one ``lstm_layer_backward``:
    no loop in either graph; the states' gradient is one concat, no index_add."""
    m = tj.nn.LSTM(5, 4, num_layers=2)
    cf = tj.trace(lambda x: _loss(tj, m, x))
    cf(tj.tensor(np.ones((6, 2, 5), np.float32), requires_grad=True))
    names_f, names_b = _fwd_bwd_names(cf)
    assert names_f.count("lstm_layer") == 2 and names_f.count("lstm_layer_states") == 2
    assert "scan" not in names_f
    assert names_b.count("lstm_layer_backward") == 2 and "scan" not in names_b
    assert "lstm_layer" not in names_b                         # the forward's result is saved
    # the (L, 2H, N) states' gradient: one concat of h's and c's blocks per layer; the
    # final h and c (single steps) are each a concat with a zero gap added into their block
    assert names_b.count("concat") == 6 and names_b.count("index_add") == 0
    # per layer: d W_ih and d x backward (the input projection, d W_hh and the per-step
    # products are inside the layer's ops)
    assert names_f.count("matmul") == 0 and names_b.count("matmul") == 4


def test_a_compiled_gru_layer_is_the_eager_layers_two_ops():
    m = tj.nn.GRU(5, 4, num_layers=2)
    cf = tj.trace(lambda x: _loss(tj, m, x))
    cf(tj.tensor(np.ones((6, 2, 5), np.float32), requires_grad=True))
    names_f, names_b = _fwd_bwd_names(cf)
    assert names_f.count("gru_layer") == 2 and names_f.count("gru_layer_states") == 2
    assert names_b.count("gru_layer_backward") == 2 and "scan" not in names_f + names_b


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_a_compiled_rnn_layer_is_the_eager_layers_op(nonlinearity):
    """Captured, an RNN layer is one ``rnn_layer`` equation, differentiated by its record's
    VJP into one ``rnn_layer_backward`` (no loop); compiled gradients equal PyTorch's."""
    tm = torch.nn.RNN(5, 4, num_layers=2, nonlinearity=nonlinearity)
    m = tj.nn.RNN(5, 4, num_layers=2, nonlinearity=nonlinearity)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x0 = np.random.default_rng(4).standard_normal((6, 2, 5)).astype(np.float32)
    cf = tj.trace(lambda x: _loss(tj, m, x))
    x = tj.tensor(x0, requires_grad=True)
    cf(x).backward()
    tx = torch.tensor(x0, requires_grad=True)
    _loss(torch, tm, tx).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (name, p), tp in zip(m.named_parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    names_f, names_b = _fwd_bwd_names(cf)
    assert names_f.count("rnn_layer") == 2 and names_b.count("rnn_layer_backward") == 2
    assert "scan" not in names_f + names_b and "rnn_layer" not in names_b


def test_an_lstm_whose_states_are_unused_gets_h_gradient_alone():
    """A language model reads the outputs only: the (L, 2H, N) states' cotangent would be
    h's gradient next to zeros; the optimized backward hands h's gradient to
    ``lstm_layer_backward`` alone (jit/passes.py `_lstm_h_cotangent`). Gradients as PyTorch's."""
    from tracejit.jit import passes
    tm = torch.nn.LSTM(5, 4, num_layers=2, batch_first=True)
    m = tj.nn.LSTM(5, 4, num_layers=2, batch_first=True)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x0 = np.random.default_rng(4).standard_normal((3, 7, 5)).astype(np.float32)

    def lm_loss(lib, m, x):
        out, _ = m(x)
        return (out * out).sum()

    tx = torch.tensor(x0, requires_grad=True)
    lm_loss(torch, tm, tx).backward()
    f = tj.script(lambda x: lm_loss(tj, m, x))
    for _ in range(2):
        for p in m.parameters():
            p.grad = None
        x = tj.tensor(x0, requires_grad=True)
        f(x).backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
        for (name, p), tp in zip(m.named_parameters(), tm.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    g = f.entries[0].graph
    _, bwd, _ = split(g, [True] * len(g.inputs))
    before = [e.prim.name for e in bwd.eqns]
    opt = passes.optimize(bwd)
    after = [e.prim.name for e in opt.eqns]
    assert before.count("concat") == 2 and after.count("concat") == 0, after
    backs = [e for e in opt.eqns if e.prim.name == "lstm_layer_backward"]
    assert len(backs) == 2 and all(e.inputs[0].aval.shape == (7, 4, 3) for e in backs)


def test_a_compiled_batch_first_language_models_gradients_match_pytorch():
    """A batch_first LSTM language model (LSTM, Linear head), compiled: each layer's output
    cotangent arrives as a permuted view of rows (the gradient of nn/recurrent._time_major_rows'
    copy); the gradients are PyTorch's."""
    r = np.random.default_rng(8)
    tl, th = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True), torch.nn.Linear(16, 5)
    ml, mh = tj.nn.LSTM(8, 16, num_layers=2, batch_first=True), tj.nn.Linear(16, 5)
    for m, t in ((ml, tl), (mh, th)):
        m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x0 = r.standard_normal((3, 7, 8)).astype(np.float32)

    def loss(lstm, head, x):
        out, _ = lstm(x)
        y = head(out)
        return (y * y).sum()

    tx = torch.tensor(x0, requires_grad=True)
    loss(tl, th, tx).backward()
    f = tj.script(lambda x: loss(ml, mh, x))
    x = tj.tensor(x0, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    params = list(ml.named_parameters()) + list(mh.named_parameters())
    for (name, p), tp in zip(params, list(tl.parameters()) + list(th.parameters())):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
