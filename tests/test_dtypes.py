"""DType objects, dtype lookup and the promotion functions behind every op."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import tracejit as tj
from tracejit import dtypes as D


def test_dtype_objects():
    assert tj.float32.name == "float32" and tj.float32.np == np.float32 and tj.float32.itemsize == 4
    assert tj.float32.is_floating_point and not tj.float32.is_integer
    assert tj.int64.is_integer and tj.bool_.is_bool
    assert repr(tj.float64) == "tracejit.float64"
    assert tj.float is tj.float32 and tj.double is tj.float64 and tj.long is tj.int64
    assert tj.int is tj.int32 and tj.half is tj.float16 and tj.bool is tj.bool_
    assert pickle.loads(pickle.dumps(tj.float16)) is tj.float16


@pytest.mark.parametrize("spec, expect", [
    (tj.float32, tj.float32), (np.float64, tj.float64), (np.dtype("int32"), tj.int32), ("int64", tj.int64),
    ("float", tj.float32), ("double", tj.float64), ("long", tj.int64), ("short", D.int16),
    (float, tj.float32), (int, tj.int64), (bool, tj.bool_), (np.uint8, tj.uint8), ("bool", tj.bool_),
])
def test_as_dtype(spec, expect):
    assert D.as_dtype(spec) is expect


def test_as_dtype_rejects_unknown():
    with pytest.raises(TypeError, match="unsupported dtype"):
        D.as_dtype(np.uint32)
    with pytest.raises(TypeError):
        D.as_dtype("not-a-dtype")


def test_default_dtype():
    assert tj.get_default_dtype() is tj.float32
    tj.set_default_dtype(tj.float64)
    try:
        assert D.as_dtype(float) is tj.float64
        assert tj.zeros(1).dtype is tj.float64
    finally:
        tj.set_default_dtype(tj.float32)
    with pytest.raises(TypeError):
        tj.set_default_dtype(tj.int32)


@pytest.mark.parametrize("a, b, expect", [
    (tj.int64, tj.float32, tj.float32),
    (tj.int32, tj.float16, tj.float16),
    (tj.uint8, tj.int8, D.int16),
    (tj.bool_, tj.uint8, tj.uint8),
    (tj.float16, tj.float64, tj.float64),
    (tj.int8, tj.int64, tj.int64),
])
def test_promote_types(a, b, expect):
    assert D.promote_types(a, b) is expect
    assert D.promote_types(b, a) is expect


def test_result_type_tiers():
    f32, f64, i32, i64 = tj.float32, tj.float64, tj.int32, tj.int64
    assert D.result_type([f32], [f32]) is f32            # tensor * Python float
    assert D.result_type([i64], [f32]) is f32            # int tensor * Python float -> default float
    assert D.result_type([i32], [i64]) is i32            # int32 tensor * Python int
    assert D.result_type([f32], [], [f64]) is f32        # 0-d f64 does not widen f32[n]
    assert D.result_type([i32], [], [f64]) is f64        # ...but does lift an int tensor
    assert D.result_type([], [f32], [i32]) is f32        # 0-d int tensor * Python float
    assert D.result_type([], [i64], [tj.uint8]) is tj.uint8
    assert D.result_type([], []) is f32
    assert D.scalar_dtype(True) is tj.bool_ and D.scalar_dtype(3) is i64 and D.scalar_dtype(2.5) is f32


def test_is_signed_matches_torch():
    torch = pytest.importorskip("torch")
    for name in ("float16", "bfloat16", "float32", "float64", "complex64", "uint8", "int8", "int16", "int32",
                 "int64", "bool"):
        assert getattr(tj, name).is_signed is getattr(torch, name).is_signed, name


_FILLS = {   # a Python number stored into a tensor of a given dtype
    "fill_": lambda L, x, v: x.clone().fill_(v),
    "full_like": lambda L, x, v: L.full_like(x, v),
    "masked_fill": lambda L, x, v: x.masked_fill(L.tensor([True, False, True]), v),
    "index_fill": lambda L, x, v: x.index_fill(0, L.tensor([1]), v),
    "x[mask] = v": lambda L, x, v: (lambda y: (y.__setitem__(y >= 0, v), y)[1])(x.clone()),
}


@pytest.mark.parametrize("form", list(_FILLS))
@pytest.mark.parametrize("dtype,value", [("uint8", -3), ("uint8", -256), ("uint8", 300), ("uint8", -0.5),
                                         ("int8", 200), ("int32", float("inf")), ("int64", float("nan")),
                                         ("int16", 1 + 2j), ("float16", 70000.0), ("float32", 1e40),
                                         ("float32", float("-inf")), ("bool", 300)])
def test_numbers_stored_into_a_dtype_convert_or_raise_as_pytorch(form, dtype, value):
    torch = pytest.importorskip("torch")
    f = _FILLS[form]
    try:
        want = f(torch, torch.tensor([1, 2, 3]).to(getattr(torch, dtype)), value).tolist()
    except RuntimeError:
        want = None
    x = tj.tensor([1, 2, 3]).to(getattr(tj, dtype))
    for g in (lambda x: f(tj, x, value), tj.compile(lambda x: f(tj, x, value))):
        if want is None:
            with pytest.raises(RuntimeError, match="cannot be converted to type"):
                g(x)
        else:
            assert g(x).tolist() == want


@pytest.mark.parametrize("dtype,value", [("int8", np.int64(300)), ("float32", np.float64(1e40)),
                                         ("uint8", np.int16(-3))])
def test_numpy_numbers_stored_into_a_dtype_convert_or_raise_as_pytorch(dtype, value):
    torch = pytest.importorskip("torch")
    for f in (_FILLS["fill_"], _FILLS["masked_fill"]):
        try:
            want = f(torch, torch.tensor([1, 2, 3]).to(getattr(torch, dtype)), value).tolist()
        except RuntimeError:
            with pytest.raises(RuntimeError, match="cannot be converted to type"):
                f(tj, tj.tensor([1, 2, 3]).to(getattr(tj, dtype)), value)
        else:
            assert f(tj, tj.tensor([1, 2, 3]).to(getattr(tj, dtype)), value).tolist() == want
