"""Differential fuzzing of dtype promotion against PyTorch: bool / integer / float tensors
with dims, 0-d tensors and Python scalars (huge, negative, nan, inf, bools) meeting in
binary operators and functions (integer division and remainder signs, shifts, bitwise
ops, comparisons), ``where``, and ``clamp`` / ``clip`` with scalar and tensor bounds;
eagerly, and captured for some. Cases PyTorch refuses by argument type are skipped."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"]
SHAPES = [(3, 4), (4,), (), (1, 4)]
SCALARS = [2, -3, 0, 7, 2.5, -0.5, True, False, 1e10, 255, float("inf"), float("nan"), -7.0]
BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
          "%": operator.mod, "<": operator.lt, "==": operator.eq, "&": operator.and_, "|": operator.or_,
          "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift, "**": operator.pow}
FUNCS = ["maximum", "minimum", "fmod", "remainder", "floor_divide", "atan2", "fmax", "bitwise_left_shift",
         "logical_xor", "copysign", "float_power", "gcd"]


def _array(r, dt, shape):
    if dt == "bool":
        a = r.random(shape) > 0.5
    elif dt == "uint8":
        a = r.integers(0, 256, shape)
    elif dt.startswith("int"):
        a = r.integers(-9, 10, shape)
    else:
        a = r.standard_normal(shape) * 4
        a = np.round(a) if r.random() < 0.3 else a
    return np.asarray(a, dtype=dt)


def _operand(r):
    k = int(r.integers(4))
    if k == 0:
        return SCALARS[int(r.integers(len(SCALARS)))]
    return _array(r, DTYPES[int(r.integers(len(DTYPES)))], () if k == 1 else SHAPES[int(r.integers(len(SHAPES)))])


def _case(r):
    x = _array(r, DTYPES[int(r.integers(len(DTYPES)))], SHAPES[int(r.integers(len(SHAPES)))])
    a, b = _operand(r), _operand(r)
    kind = ["binary", "func", "where", "clamp", "clamp_tensor"][int(r.integers(5))]
    op = sorted(BINARY)[int(r.integers(len(BINARY)))] if kind == "binary" else FUNCS[int(r.integers(len(FUNCS)))]

    def fn(lib, X, A, B):
        if kind == "binary":
            return BINARY[op](X, A) if r_right else BINARY[op](A, X)
        if kind == "func":
            return getattr(lib, op)(X, A)
        if kind == "where":
            return lib.where(X > 0, A, B)
        if kind == "clamp":
            return X.clamp(min=A if not isinstance(A, bool) else None, max=B if not isinstance(B, bool) else None)
        return lib.clamp(X, A, B)
    r_right = bool(r.integers(2))
    return fn, [x, a, b], dict(kind=kind, op=op, x=(x.dtype, x.shape), a=a, b=b, right=r_right)


def _to(lib, v):
    return lib.tensor(v) if isinstance(v, np.ndarray) else v.item() if isinstance(v, np.generic) else v


def _check(seed, captured):
    r = np.random.default_rng(seed)
    fn, args, info = _case(r)
    try:
        want = fn(torch, *[_to(torch, v) for v in args])
    except (TypeError, RuntimeError, NotImplementedError, ZeroDivisionError):
        return   # (PyTorch's argument types, or an integer division by zero)
    f = (lambda *a: fn(tj, *a))
    if captured:
        f = tj.trace(f, compiler="interpret")
    got = f(*[_to(tj, v) for v in args])
    what = f"seed {seed} {info} captured={captured}"
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], what
    assert tuple(got.shape) == tuple(want.shape), what
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64),
                               rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=what)


@pytest.mark.filterwarnings("ignore")
def test_random_promotions_match_torch():
    for seed in range(4000):
        _check(seed, False)


@pytest.mark.filterwarnings("ignore")
def test_random_promotions_captured_match_torch():
    for seed in range(1000):
        _check(seed, True)


@pytest.mark.parametrize("bounds", [(float("nan"), None), (None, float("nan")), (-1.0, float("nan"))])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_clamp_nan_bound_gives_nan_and_no_gradient(bounds, dtype):
    x = np.array([1, -5, 3], dtype)
    want = torch.tensor(x).clamp(*bounds)
    got = tj.tensor(x).clamp(*bounds)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if dtype == "float32":
        xt = tj.tensor(x, requires_grad=True)
        xt.clamp(*bounds).sum().backward()
        np.testing.assert_array_equal(xt.grad.numpy(), [0.0, 0.0, 0.0])


def test_clamp_tensor_bounds_promote_with_all_three():
    # a 0-d uint8 input, a bool bound with dims and a 0-d int16 bound: int16, as PyTorch
    args = (np.array(3, np.uint8), np.array([True, False, True]), np.array(2, np.int16))
    want = torch.clamp(*[torch.tensor(a) for a in args])
    got = tj.clamp(*[tj.tensor(a) for a in args])
    assert got.dtype is tj.int16 and want.dtype is torch.int16
    np.testing.assert_array_equal(got.numpy(), want.numpy())
