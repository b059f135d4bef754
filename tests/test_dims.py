"""Dim and size arguments given as 0-d integer tensors or numpy ints are read as the int they
hold, as PyTorch reads them (tracejit/dims.py, ops/shape_params.py `as_size`)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

CALLS = {
    "sum": lambda m, a, n: a.sum(n - 1), "cumsum": lambda m, a, n: a.cumsum(n - 1),
    "softmax": lambda m, a, n: a.softmax(n - 1), "gather": lambda m, a, n: a.gather(n - 1, m.zeros(3, 1, dtype=m.long)),
    "transpose": lambda m, a, n: a.transpose(n - 2, n - 1), "flatten": lambda m, a, n: a.flatten(n - 2),
    "squeeze": lambda m, a, n: a[:, :1].squeeze(n - 1), "unsqueeze": lambda m, a, n: a.unsqueeze(n),
    "movedim": lambda m, a, n: a.movedim(0, n - 1), "std_mean": lambda m, a, n: m.std_mean(a, n - 1)[1],
    "roll": lambda m, a, n: a.roll(n, 1), "roll tuple": lambda m, a, n: a.roll((n, 1), (0, 1)),
    "split": lambda m, a, n: a.split(n, 1)[1], "chunk": lambda m, a, n: a.chunk(n, 1)[0],
    "unfold": lambda m, a, n: a.unfold(1, n, n - 1), "squeeze numpy": lambda m, a, n: a[:1].squeeze(np.int64(0)),
}


@pytest.mark.parametrize("call", CALLS)
def test_0d_integer_tensors_as_dims_and_sizes(call):
    want = CALLS[call](torch, torch.arange(12.0).reshape(3, 4), torch.tensor(2))
    got = CALLS[call](tj, tj.arange(12.0).reshape(3, 4), tj.tensor(2))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_a_float_tensor_is_no_dim():
    with pytest.raises(TypeError, match="dim must be an int"):
        tj.ones(2, 3).sum(tj.tensor(1.0))
