"""The eager LSTM's whole-sequence layer node (tracejit/ops/lstm_layer.py, ops/lstm_prim.py)
against PyTorch: structure (two op calls per layer and direction, no per-step GEMM of
the weights' gradient), values and gradients of every input in float64, in-place
modification of an output, saturated gates, shape errors."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError
from tracejit.ops import linalg, lstm_prim

from layer_pairs import (check_final_state_only, check_saturated_gates_stay_finite,
                         check_values_and_gradients, torch_pair)

torch = pytest.importorskip("torch", reason="the LSTM layer is checked against PyTorch")


def _pair(**kw):
    return torch_pair(torch, "LSTM", 3, **kw)


def _count_calls(monkeypatch):
    calls = {"lstm_layer": 0, "lstm_layer_backward": 0, "matmul": []}
    for prim in (lstm_prim.LSTM_LAYER, lstm_prim.LSTM_LAYER_BACKWARD):
        orig = prim.run

        def counted(xp, *a, _orig=orig, _name=prim.name, **kw):
            calls[_name] += 1
            return _orig(xp, *a, **kw)
        monkeypatch.setattr(prim, "run", counted)
    for prim in linalg.PRODUCTS:   # matmul and the transposed-operand records its backward runs
        monkeypatch.setattr(prim, "run", lambda xp, a, b, _orig=prim.run, _name=prim.name:
                            calls["matmul"].append((_name, a.shape, b.shape)) or _orig(xp, a, b))
    return calls


def test_a_layer_is_one_op_forward_and_one_backward(monkeypatch):
    m, _ = _pair(num_layers=2, bidirectional=True)
    x = tj.tensor(np.random.default_rng(0).standard_normal((9, 2, 3)), requires_grad=True)
    calls = _count_calls(monkeypatch)
    out, _ = m(x)
    assert calls["lstm_layer"] == 4 and calls["lstm_layer_backward"] == 0
    assert calls["matmul"] == []               # the input projections are inside lstm_layer
    out.sum().backward()
    assert calls["lstm_layer_backward"] == 4
    # backward: per layer and direction d W_ih and d x (the per-step products and d W_hh
    # are inside lstm_layer_backward)
    assert len(calls["matmul"]) == 8


@pytest.mark.parametrize("kw", [dict(num_layers=2), dict(bidirectional=True, batch_first=True),
                                dict(bias=False)], ids=["2 layers", "bidirectional batch_first", "no bias"])
def test_values_and_gradients_match_torch(kw):
    m, t = _pair(**kw)
    check_values_and_gradients(torch, m, t, kw)


def test_only_the_final_state_used():
    """Outputs without a gradient (here: the sequence output) count as zeros."""
    check_final_state_only(torch, *_pair())


def test_modifying_an_output_in_place_is_reported():
    m, _ = _pair()
    x = tj.tensor(np.random.default_rng(3).standard_normal((4, 2, 3)), requires_grad=True)
    out, (h, c) = m(x)
    loss = (out * out).sum() + c.sum()
    with tj.no_grad():
        out.mul_(2.0)               # a view of the layer's saved result
    with pytest.raises(RuntimeError, match="modified by an inplace operation|in-place"):
        loss.backward()


def test_saturated_gates_stay_finite():
    check_saturated_gates_stay_finite("LSTM")


def test_shape_errors_name_the_operands():
    x, wx, w, b = tj.zeros(3, 2, 5), tj.zeros(8, 5), tj.zeros(8, 2), tj.zeros(8)
    with pytest.raises(ShapeError, match=r"h0 \(3, 2\)"):
        lstm_prim.lstm_layer(x, wx, w, b, tj.zeros(3, 2), tj.zeros(2, 2))
    with pytest.raises(ShapeError, match=r"x \(3, 2, 5\), w_ih \(8, 5\), w \(8, 3\)"):
        lstm_prim.lstm_layer(x, wx, tj.zeros(8, 3), b, tj.zeros(2, 2), tj.zeros(2, 2))
    with pytest.raises(ShapeError, match=r"w_ih \(8, 4\)"):
        lstm_prim.lstm_layer(x, tj.zeros(8, 4), w, b, tj.zeros(2, 2), tj.zeros(2, 2))
    with pytest.raises(ShapeError, match=r"b \(4,\)"):
        lstm_prim.lstm_layer(x, wx, w, tj.zeros(4), tj.zeros(2, 2), tj.zeros(2, 2))
    with pytest.raises(ShapeError, match=r"expected x \(L, N, I\)"):
        lstm_prim.lstm_layer(tj.zeros(3, 10), wx, w, b, tj.zeros(2, 2), tj.zeros(2, 2))
