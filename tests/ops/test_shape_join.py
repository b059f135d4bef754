"""cat and stack (tracejit/ops/shape.py) under numpy's ``axis=`` name for ``dim``, which
PyTorch takes: RAFT's ``torch.stack(torch.meshgrid(dy, dx), axis=-1)``."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")


@pytest.mark.parametrize("op", ["cat", "stack"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_axis_is_numpys_name_for_dim(op, axis):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = getattr(torch, op)([torch.tensor(a), torch.tensor(-a)], axis=axis)
    got = getattr(tj, op)([tj.tensor(a), tj.tensor(-a)], axis=axis)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_compiled_stack_takes_axis():
    f = tj.compile(lambda x, y: tj.stack(tj.meshgrid(x, y, indexing="ij"), axis=-1) * 2)
    x, y = np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32)
    want = torch.stack(torch.meshgrid(torch.tensor(x), torch.tensor(y), indexing="ij"), axis=-1) * 2
    np.testing.assert_array_equal(f(tj.tensor(x), tj.tensor(y)).numpy(), want.numpy())
