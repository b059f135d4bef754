"""The Elman RNN's whole-sequence layer op (tracejit/nn/rnn_layer.py, ops/rnn_prim.py)
against PyTorch: structure (one op forward and one backward per layer and direction),
values and gradients of every input in float64 for tanh and relu, final-state-only loss,
shape errors. Second order: tests/nn/test_recurrent_grad.py; captured: the op record
tests/opdb_rnn.py and tests/nn/test_recurrent_compiled.py."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.errors import ShapeError
from tracejit.ops import linalg, rnn_prim

torch = pytest.importorskip("torch", reason="the RNN layer is checked against PyTorch")


def _pair(**kw):
    torch.manual_seed(4)
    t = torch.nn.RNN(3, 4, **kw).double()
    m = nn.RNN(3, 4, dtype="float64", **kw)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return m, t


def test_a_layer_is_one_op_forward_and_one_backward(monkeypatch):
    m, _ = _pair(num_layers=2, bidirectional=True)
    x = tj.tensor(np.random.default_rng(0).standard_normal((9, 2, 3)), requires_grad=True)
    calls = {"rnn_layer": 0, "rnn_layer_backward": 0, "matmul": 0}
    for prim in (rnn_prim.RNN_LAYER, rnn_prim.RNN_LAYER_BACKWARD, linalg.MATMUL):
        def counted(xp, *a, _orig=prim.impl, _name=prim.name, **kw):
            calls[_name] += 1
            return _orig(xp, *a, **kw)
        monkeypatch.setattr(prim, "impl", counted)
    out, _ = m(x)
    assert calls == {"rnn_layer": 4, "rnn_layer_backward": 0, "matmul": 4}   # + the input projections
    out.sum().backward()
    assert calls["rnn_layer_backward"] == 4
    assert calls["matmul"] == 4 + 8            # d W_ih and d x per layer and direction


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("kw", [dict(num_layers=2), dict(bidirectional=True, batch_first=True),
                                dict(bias=False)], ids=["2 layers", "bidirectional batch_first", "no bias"])
def test_values_and_gradients_match_torch(kw, nonlinearity):
    m, t = _pair(nonlinearity=nonlinearity, **kw)
    r = np.random.default_rng(1)
    dirs = 2 if kw.get("bidirectional") else 1
    layers = kw.get("num_layers", 1)
    xv = r.standard_normal((2, 6, 3) if kw.get("batch_first") else (6, 2, 3))
    hv = r.standard_normal((layers * dirs, 2, 4))
    ours = [tj.tensor(v, requires_grad=True) for v in (xv, hv)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (xv, hv)]
    o, h = m(ours[0], ours[1])
    ot, ht = t(theirs[0], theirs[1])
    for a, b in ((o, ot), (h, ht)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-13)
    if nonlinearity == "relu":
        assert (o.detach().numpy() == 0).any()     # the relu's flat side is reached
    go, gh = (r.standard_normal(tuple(v.shape)) for v in (o, h))
    ((o * tj.tensor(go)).sum() + (h * tj.tensor(gh)).sum()).backward()
    ((ot * torch.tensor(go)).sum() + (ht * torch.tensor(gh)).sum()).backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), getattr(t, name).grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)


def test_only_the_final_state_used():
    m, t = _pair()
    xv = np.random.default_rng(2).standard_normal((5, 3, 3))
    x, xt = tj.tensor(xv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    m(x)[1].sum().backward()
    t(xt)[1].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_shape_and_argument_errors_name_the_culprit():
    gi, w, b = tj.zeros(3, 2, 2), tj.zeros(2, 2), tj.zeros(2)
    with pytest.raises(ShapeError, match=r"h0 \(3, 2\)"):
        rnn_prim.rnn_layer(gi, w, b, tj.zeros(3, 2))
    with pytest.raises(ShapeError, match=r"b \(4,\)"):
        rnn_prim.rnn_layer(gi, w, tj.zeros(4), tj.zeros(2, 2))
    with pytest.raises(ValueError, match="sigmoid"):
        rnn_prim.rnn_layer(gi, w, b, tj.zeros(2, 2), nonlinearity="sigmoid")
