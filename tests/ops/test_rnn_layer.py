"""The Elman RNN's whole-sequence layer op (tracejit/ops/rnn_layer.py, ops/rnn_prim.py)
against PyTorch: structure (one op forward and one backward per layer and direction),
values and gradients of every input in float64 for tanh and relu, final-state-only loss,
shape errors. Second order: tests/nn/test_recurrent_grad.py; captured: the op record
tests/opdb_rnn.py and tests/nn/test_recurrent_compiled.py."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError
from tracejit.ops import linalg, rnn_prim

from layer_pairs import check_final_state_only, check_values_and_gradients, count_calls, gemm_count, torch_pair

torch = pytest.importorskip("torch", reason="the RNN layer is checked against PyTorch")


def _pair(**kw):
    return torch_pair(torch, "RNN", 4, **kw)


def test_a_layer_is_one_op_forward_and_one_backward(monkeypatch):
    m, _ = _pair(num_layers=2, bidirectional=True)
    x = tj.tensor(np.random.default_rng(0).standard_normal((9, 2, 3)), requires_grad=True)
    calls = count_calls(monkeypatch, (rnn_prim.RNN_LAYER, rnn_prim.RNN_LAYER_BACKWARD) + linalg.PRODUCTS)
    out, _ = m(x)
    # + the input projections: eager linear is one x @ W^T product record
    assert calls == {"rnn_layer": 4, "rnn_layer_backward": 0, "matmul": 0,
                     "matmul_nt": 4, "matmul_tn": 0}
    out.sum().backward()
    assert calls["rnn_layer_backward"] == 4
    assert gemm_count(calls) == 4 + 8            # d W_ih and d x per layer and direction


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("kw", [dict(num_layers=2), dict(bidirectional=True, batch_first=True),
                                dict(bias=False)], ids=["2 layers", "bidirectional batch_first", "no bias"])
def test_values_and_gradients_match_torch(kw, nonlinearity):
    m, t = _pair(nonlinearity=nonlinearity, **kw)

    def flat_side_reached(o):
        if nonlinearity == "relu":
            assert (o.detach().numpy() == 0).any()     # the relu's flat side is reached
    check_values_and_gradients(torch, m, t, kw, flat_side_reached)


def test_only_the_final_state_used():
    check_final_state_only(torch, *_pair())


def test_shape_and_argument_errors_name_the_culprit():
    gi, w, b = tj.zeros(3, 2, 2), tj.zeros(2, 2), tj.zeros(2)
    with pytest.raises(ShapeError, match=r"h0 \(3, 2\)"):
        rnn_prim.rnn_layer(gi, w, b, tj.zeros(3, 2))
    with pytest.raises(ShapeError, match=r"b \(4,\)"):
        rnn_prim.rnn_layer(gi, w, tj.zeros(4), tj.zeros(2, 2))
    with pytest.raises(ValueError, match="sigmoid"):
        rnn_prim.rnn_layer(gi, w, b, tj.zeros(2, 2), nonlinearity="sigmoid")
