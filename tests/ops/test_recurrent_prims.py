"""Operand dtype errors of the recurrent layer ops (ops/lstm_prim.py, gru_prim.py,
rnn_prim.py, one shared check): an operand whose dtype differs from the first operand's (gi,
the LSTM's x), or that is not floating point, is named in the error, before anything runs."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError
from tracejit.ops import gru_prim, lstm_prim, rnn_prim

H, N, L, I = 2, 3, 4, 5
# op: (function, its first operand's shape (gi; the LSTM's x), the other operands' names)
LAYERS = {
    "lstm_layer": (lstm_prim.lstm_layer, (L, N, I), ("w_ih", "w", "b", "h0", "c0")),
    "gru_layer": (gru_prim.gru_layer, (L, N, 3 * H), ("w", "b", "h0")),
    "rnn_layer": (rnn_prim.rnn_layer, (L, N, H), ("w", "b", "h0")),
}
GATES = {"lstm_layer": 4, "gru_layer": 3, "rnn_layer": 1}


def _operands(gates: int, names, odd: str, dtype):
    shapes = {"w_ih": (gates * H, I), "w": (gates * H, H), "b": (gates * H,), "h0": (H, N), "c0": (H, N)}
    return [tj.tensor(np.zeros(shapes[n], dtype if n == odd else np.float32)) for n in names]


@pytest.mark.parametrize("dtype", [np.float64, np.int32], ids=["other float", "integer"])
@pytest.mark.parametrize("op", sorted(LAYERS))
def test_an_operand_of_another_dtype_is_named(op, dtype):
    fn, first, names = LAYERS[op]
    gates = GATES[op]
    a = tj.tensor(np.zeros(first, np.float32))
    for odd in names:
        with pytest.raises(DTypeError, match=rf"{op}: .* got {odd} of dtype {np.dtype(dtype).name} "
                                             rf"\(first operand: float32\)"):
            fn(a, *_operands(gates, names, odd, dtype))
    fn(a, *_operands(gates, names, None, None))      # all float32: accepted
