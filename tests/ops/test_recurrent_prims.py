"""Operand dtype errors of the recurrent layer ops (ops/lstm_prim.py, gru_prim.py,
rnn_prim.py, one shared check): an operand whose dtype differs from gi's, or that is not
floating point, is named in the error, before anything runs."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError
from tracejit.ops import gru_prim, lstm_prim, rnn_prim

H, N, L = 2, 3, 4
LAYERS = {
    "lstm_layer": (lstm_prim.lstm_layer, 4, ("w", "b", "h0", "c0")),
    "gru_layer": (gru_prim.gru_layer, 3, ("w", "b", "h0")),
    "rnn_layer": (rnn_prim.rnn_layer, 1, ("w", "b", "h0")),
}


def _operands(gates: int, names, odd: str, dtype):
    shapes = {"w": (gates * H, H), "b": (gates * H,), "h0": (H, N), "c0": (H, N)}
    return [tj.tensor(np.zeros(shapes[n], dtype if n == odd else np.float32)) for n in names]


@pytest.mark.parametrize("dtype", [np.float64, np.int32], ids=["other float", "integer"])
@pytest.mark.parametrize("op", sorted(LAYERS))
def test_an_operand_of_another_dtype_is_named(op, dtype):
    fn, gates, names = LAYERS[op]
    gi = tj.tensor(np.zeros((L, N, gates * H), np.float32))
    for odd in names:
        with pytest.raises(DTypeError, match=rf"{op}: .* got {odd} of dtype {np.dtype(dtype).name} \(gi: float32\)"):
            fn(gi, *_operands(gates, names, odd, dtype))
    fn(gi, *_operands(gates, names, None, None))      # all float32: accepted
