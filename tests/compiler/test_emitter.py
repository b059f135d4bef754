"""The scalar-rule emitter (compiler/emitter.py): an integer power with negative exponents
in a compiled kernel computes what eager code and PyTorch compute."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_pow_with_negative_exponents_matches_pytorch(dtype):
    # (0 ** -1 gave the kernel's integer division by zero: the smallest int64)
    b = np.array([0, 4, -5, 2, 1, -1, -1, 0, 3], dtype)
    e = np.array([-1, 0, 3, -2, -7, -3, -4, 0, 2], dtype)
    f = tj.trace(lambda x, y: tj.pow(x, y) * 1, compile="sync")
    got = f(tj.tensor(b), tj.tensor(e)).numpy()
    np.testing.assert_array_equal(got, torch.pow(torch.tensor(b), torch.tensor(e)).numpy())
    np.testing.assert_array_equal(got, tj.pow(tj.tensor(b), tj.tensor(e)).numpy())
