"""Differential fuzzing of integer pow in compiled kernels against PyTorch: int32 and int64
bases (0, +-1, even and odd) to tensor exponents from 0 to near 2**63, negative ones too,
wrap as PyTorch's (and eager's) do; numba's own integer power turns to a float pow for
exponents above 2**16."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_random_integer_powers_match_torch(dtype):
    r = np.random.default_rng(0)
    hi = np.iinfo(dtype).max
    base = np.concatenate([[0, 1, -1, 2, -2, 3, -5, 7], r.integers(-50, 50, 24)]).astype(dtype)
    exps = np.concatenate([[0, 1, 2, 63, 65536, 65537, hi - 1, hi, 2 ** 30 + 3],
                           r.integers(0, hi, 16, dtype=dtype), r.integers(0, 70000, 4), -r.integers(1, 9, 3)])
    x, e = np.meshgrid(base, exps.astype(dtype))
    want = torch.tensor(x) ** torch.tensor(e)
    f = tj.compile(lambda a, b: a ** b)
    got = f(tj.tensor(x), tj.tensor(e))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal((tj.tensor(x) ** tj.tensor(e)).numpy(), want.numpy())
