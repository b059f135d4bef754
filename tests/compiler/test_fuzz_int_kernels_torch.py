"""Differential fuzzing of integer arithmetic in compiled kernels against PyTorch: random
chains of int8 / uint8 / int32 / int64 ops fused into one kernel (a wrapped difference or
product fed to fmod, remainder, floor division, shifts, comparisons), where each step's
value must wrap to its dtype as eagerly (numba computes small integers in int64); and
integer pow with tensor exponents from 0 to near 2**63 (numba's own integer power turns
to a float pow above 2**16)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

OPS = {
    "sub": lambda lib, x, y: x - y, "mul": lambda lib, x, y: x * y + 7, "neg": lambda lib, x, y: -x,
    "fmod": lambda lib, x, y: lib.fmod(x, y.abs() + 1), "rem": lambda lib, x, y: x % (y.abs() + 1),
    "floordiv": lambda lib, x, y: x // (y.abs() + 1), "shift": lambda lib, x, y: (x << 1) >> 2,
    "cmp": lambda lib, x, y: (x > y).to(x.dtype), "max": lambda lib, x, y: lib.maximum(x, y),
    "pow": lambda lib, x, y: x ** (y.abs() % 4), "flip": lambda lib, x, y: x.flip(1) - y,
}


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_random_integer_chains_match_torch(dtype):
    r = np.random.default_rng(1)
    hi = min(np.iinfo(dtype).max, 2 ** 31)
    for _ in range(12):
        ops = [sorted(OPS)[int(i)] for i in r.integers(0, len(OPS), 4)]

        def fn(lib, x, y):
            for op in ops:
                x = OPS[op](lib, x, y)
            return x
        x, y = (r.integers(np.iinfo(dtype).min if dtype != "int64" else -hi, hi, (3, 4), dtype=dtype)
                for _ in range(2))
        want = fn(torch, torch.tensor(x), torch.tensor(y))
        got = tj.compile(lambda a, b: fn(tj, a, b))(tj.tensor(x), tj.tensor(y))
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{dtype} {ops}")


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
