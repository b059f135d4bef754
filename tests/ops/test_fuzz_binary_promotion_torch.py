"""Differential fuzzing of type promotion in binary ops against PyTorch: each op on a
tensor of every dtype (bool, uint8, int8..int64, float16, bfloat16, float32, float64) with
a tensor, a 0-d tensor or a Python number (bool, int, negative int, float) on the other
side, eagerly and through ``tj.compile`` (plain and ``dynamic=True``): the result's dtype
and values must be PyTorch's. Calls PyTorch refuses are skipped (tracejit accepts more)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

OPS = ["add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "maximum",
       "minimum", "eq", "lt", "ge", "ne", "atan2", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and",
       "logical_xor", "hypot", "copysign", "fmax", "xlogy", "where", "clamp", "lerp", "ldexp", "heaviside",
       "addcmul", "float_power", "gcd", "lcm", "bitwise_left_shift", "isclose", "nextafter"]
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
NUMBERS = {"bool": True, "float": 2.5, "int": 3, "neg": -2}


def _operand(lib, kind, dt, r):
    if kind == "number":
        return NUMBERS[dt]
    v = r.integers(0 if dt in ("bool", "uint8") else -3, 4, () if kind == "0d" else (3,))
    return lib.tensor(np.asarray(v > 0 if dt == "bool" else v)).to(getattr(lib, dt))


def _call(lib, op, a, b):
    if op == "where":
        return lib.where(a > 0, a, b)
    if op == "clamp":
        return lib.clamp(a, min=b)
    if op == "lerp":
        return lib.lerp(a, b, 0.5)
    if op == "addcmul":
        return lib.addcmul(a, a, b)
    return getattr(lib, op)(a, b)


def _result(lib, op, kinds, dts, seed, compile_kw):
    r = np.random.default_rng(seed + 1000)
    a, b = _operand(lib, kinds[0], dts[0], r), _operand(lib, kinds[1], dts[1], r)
    if compile_kw is None:
        out = _call(lib, op, a, b)
    elif kinds[1] == "number":
        out = tj.compile(lambda a: _call(lib, op, a, b), **compile_kw)(a)
    else:
        out = tj.compile(lambda a, b: _call(lib, op, a, b), **compile_kw)(a, b)
    return str(out.dtype).split(".")[-1], np.asarray(out.float().numpy(), dtype="float64")


@pytest.mark.parametrize("block", range(8))
def test_binary_ops_promote_as_pytorch(block):
    for seed in range(block * 50, block * 50 + 50):
        r = np.random.default_rng(seed)
        op = OPS[seed % len(OPS)]
        kinds = (("t", "0d")[int(r.integers(2))], ("t", "0d", "number")[int(r.integers(3))])
        dts = (DTYPES[int(r.integers(len(DTYPES)))],
               sorted(NUMBERS)[int(r.integers(4))] if kinds[1] == "number" else DTYPES[int(r.integers(len(DTYPES)))])
        try:
            want = _result(torch, op, kinds, dts, seed, None)
        except (RuntimeError, TypeError):
            continue
        mode = (None, {}, {"dynamic": True})[seed % 3]
        got = _result(tj, op, kinds, dts, seed, mode)
        what = f"seed {seed} {op}{kinds}{dts} compile={mode}"
        assert got[0] == want[0], (what, got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-2, atol=1e-2, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("number", [2.5, -1, True])
def test_xlogy_with_a_number_keeps_the_tensors_dtype(dtype, number):
    dts = (dtype, {2.5: "float", -1: "neg", True: "bool"}[number])
    for mode in (None, {}):
        want = _result(torch, "xlogy", ("t", "number"), dts, 7, None)
        got = _result(tj, "xlogy", ("t", "number"), dts, 7, mode)
        assert got[0] == want[0]
        np.testing.assert_allclose(got[1], want[1], rtol=1e-2, atol=1e-2, equal_nan=True)
