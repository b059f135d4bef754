"""The eager GRU's whole-sequence layer node (tracejit/ops/gru_layer.py, ops/gru_prim.py)
against PyTorch: structure (one op forward and one backward per layer and direction),
values and gradients of every input in float64, final-state-only loss, saturated gates,
shape errors. Second order: tests/nn/test_recurrent_grad.py."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError
from tracejit.ops import gru_prim, linalg

from layer_pairs import (check_final_state_only, check_saturated_gates_stay_finite,
                         check_values_and_gradients, count_calls, gemm_count, torch_pair)

torch = pytest.importorskip("torch", reason="the GRU layer is checked against PyTorch")


def _pair(**kw):
    return torch_pair(torch, "GRU", 4, **kw)


def test_a_layer_is_one_op_forward_and_one_backward(monkeypatch):
    m, _ = _pair(num_layers=2, bidirectional=True)
    x = tj.tensor(np.random.default_rng(0).standard_normal((9, 2, 3)), requires_grad=True)
    calls = count_calls(monkeypatch, (gru_prim.GRU_LAYER, gru_prim.GRU_LAYER_BACKWARD) + linalg.PRODUCTS)
    out, _ = m(x)
    # + the input projections: eager linear is one x @ W^T product record
    assert calls == {"gru_layer": 4, "gru_layer_backward": 0, "matmul": 0,
                     "matmul_nt": 4, "matmul_tn": 0}
    out.sum().backward()
    assert calls["gru_layer_backward"] == 4
    assert gemm_count(calls) == 4 + 8            # d W_ih and d x per layer and direction


@pytest.mark.parametrize("kw", [dict(num_layers=2), dict(bidirectional=True, batch_first=True),
                                dict(bias=False)], ids=["2 layers", "bidirectional batch_first", "no bias"])
def test_values_and_gradients_match_torch(kw):
    m, t = _pair(**kw)
    check_values_and_gradients(torch, m, t, kw)


def test_only_the_final_state_used():
    check_final_state_only(torch, *_pair())


def test_saturated_gates_stay_finite():
    check_saturated_gates_stay_finite("GRU")


def test_shape_errors_name_the_operands():
    gi, w, b = tj.zeros(3, 2, 6), tj.zeros(6, 2), tj.zeros(6)
    with pytest.raises(ShapeError, match=r"h0 \(3, 2\)"):
        gru_prim.gru_layer(gi, w, b, tj.zeros(3, 2))
    with pytest.raises(ShapeError, match=r"b \(4,\)"):
        gru_prim.gru_layer(gi, w, tj.zeros(4), tj.zeros(2, 2))
