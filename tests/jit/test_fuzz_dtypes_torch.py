"""Differential fuzzing of integer, bool and float64 tensors against PyTorch, a sibling of
test_fuzz_ops_torch.py: seeded random binary operators and functions between int8..int64,
uint8, bool, float32 and float64 operands (tensors, 0-d tensors, Python scalars on either
side; transposed and strided layouts), so promotion, floor division and remainder signs,
bitwise ops and shifts meet every dtype pair; unary functions and reductions over empty
and size-1 dims, with ties, NaN and inf (sorts, unique, median, mode, var/std, arg
extremes). Each runs eagerly and, where its output shape does not depend on the data,
captured (``tj.trace``, the IR interpreter): values and dtypes exactly (floats: float32
1e-5, float64 1e-12). A call PyTorch refuses is skipped."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

DTYPES = ["int64", "int32", "int16", "int8", "uint8", "bool", "float64", "float32"]
SCALARS = [2, -3, 0, 1, True, False, 2.5, -0.5, 7]
SHAPES = [(3, 4), (4,), (), (1, 4), (0, 4), (2, 1, 4)]
BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
          "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "and": operator.and_,
          "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
          "lt": operator.lt, "le": operator.le, "eq": operator.eq, "ne": operator.ne}
FUNCTIONS = ["fmod", "remainder", "floor_divide", "maximum", "minimum", "bitwise_and", "bitwise_left_shift",
             "bitwise_right_shift", "atan2", "hypot", "copysign", "fmax", "fmin", "logical_and", "logical_xor",
             "true_divide", "ldexp", "xlogy", "isclose"]
UNARY = ["neg", "abs", "sign", "bitwise_not", "logical_not", "square", "exp", "sqrt", "reciprocal", "sigmoid", "floor",
         "round", "trunc", "frac", "isnan", "isinf", "isfinite", "signbit", "sum", "prod", "cumsum", "mean", "amax",
         "nansum", "count_nonzero", "float_power", "erf", "diff", "flip", "tril", "relu", "var", "norm", "logsumexp",
         "nan_to_num", "heaviside"]
REDUCTIONS = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "std", "var", "logsumexp", "any",
              "all", "nansum", "nanmean", "norm", "count_nonzero", "cumsum", "cumprod", "softmax", "median", "nanmedian",
              "sort", "argsort", "topk", "kthvalue", "unique", "msort", "aminmax", "cummax", "logcumsumexp", "mode",
              "max_all", "median_all", "nanmedian_all", "sort_desc"]
EDGE_SHAPES = [(0,), (0, 3), (3, 0), (1, 3), (3, 1), (1,), (), (2, 0, 3), (1, 1), (4, 5)]
# data-dependent output shapes: eager only (their capture is refused with a TraceError)
EAGER_ONLY = {"unique", "cummax", "mode"}


def _arr(r, dtype, shape, specials=False):
    if dtype == "bool":
        return r.random(shape) > 0.5
    if not dtype.startswith("float"):
        return r.integers(0 if dtype == "uint8" else -6, 7, shape).astype(dtype)
    a = np.round(r.standard_normal(shape) * (1 if specials else 3), int(r.integers(0, 2)))
    for _ in range(2 if specials and a.size and r.random() < 0.6 else 0):
        a.flat[r.integers(a.size)] = [np.nan, np.inf, -np.inf, np.nan][r.integers(4)]
    return a.astype(dtype)


def _tensor(lib, a, layout):
    if layout == "0d" and a.size:
        return lib.tensor(a.reshape(-1)[0])
    if layout == "t" and a.ndim == 2:
        return lib.tensor(np.ascontiguousarray(a.T)).T
    if layout == "s" and a.ndim >= 1:
        return lib.tensor(np.repeat(a, 2, axis=-1))[..., ::2]
    return lib.tensor(a)


def _unary(lib, name, a):
    if name in ("cumsum", "diff", "flip"):
        return getattr(lib, name)(a, dim=0) if name == "diff" else a.flip(0) if name == "flip" else a.cumsum(0)
    if name == "tril":
        return a.tril()
    if name == "float_power":
        return lib.float_power(a, 2)
    if name == "heaviside":
        return lib.heaviside(a, lib.tensor(1, dtype=a.dtype))
    if name in ("var", "norm", "logsumexp"):
        return getattr(a, name)() if name != "logsumexp" else a.logsumexp(0)
    return getattr(lib, name)(a)


def _reduce(lib, op, x, d, keep, k):
    if op.endswith("_all"):
        return getattr(x, op[:-4])()
    if op in ("sort", "sort_desc"):
        return tuple(x.sort(dim=d, descending=op == "sort_desc", stable=True))
    if op == "argsort":
        return x.argsort(dim=d, stable=True)
    if op == "topk":
        return x.topk(k, d)[0]
    if op == "kthvalue":
        return x.kthvalue(k, d, keep)[0]
    if op == "unique":
        return tuple(lib.unique(x, sorted=True, return_inverse=True, return_counts=True))
    if op == "msort":
        return lib.msort(x)
    if op in ("cumsum", "cumprod", "softmax", "logcumsumexp"):
        return getattr(x if x.dtype.is_floating_point or op.startswith("cum") else x.double(), op)(d)
    if op == "cummax":
        return tuple(x.cummax(d))
    if op == "aminmax":
        return tuple(lib.aminmax(x, dim=d, keepdim=keep))
    if op == "count_nonzero":
        return lib.count_nonzero(x, d)
    if op in ("max", "min", "median", "nanmedian", "mode"):
        return getattr(x, op)(d, keep)[0]   # (tied indices: unspecified)
    if op in ("any", "all", "argmax", "argmin", "prod", "logsumexp"):
        return getattr(x, op)(d, keep)
    if op == "norm":
        return x.norm(dim=d, keepdim=keep)
    return getattr(x, op)(d, keepdim=keep)


def _same(got, want, what):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), what
        for g, w in zip(got, want):
            _same(g, w, what)
        return
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, g.shape, w.shape, g.dtype, w.dtype)
    if w.dtype.kind == "f":
        tol = 1e-5 if w.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


def _program(seed):
    """(fn(lib, x, y), [arrays], layouts, info, traceable) for one seed."""
    r = np.random.default_rng(seed)
    kind = int(r.integers(4))
    if kind == 3:   # a reduction over edge shapes, with NaN / inf / ties
        op = REDUCTIONS[int(r.integers(len(REDUCTIONS)))]
        shape = EDGE_SHAPES[int(r.integers(len(EDGE_SHAPES)))]
        dt = ["float32", "float64", "int64", "bool"][int(r.integers(4))]
        nd = max(len(shape), 1)
        d, keep, k = int(r.integers(-nd, nd)), bool(r.integers(2)), int(r.integers(1, 3))
        a = _arr(r, dt, shape, specials=op != "mode")   # (PyTorch's mode among NaNs: its sort's artifact)
        if op.endswith("median_all") and not dt.startswith("float") and not a.size:
            op = "sum_all"   # (PyTorch's median of no integers is whatever its buffer held; tracejit refuses)
        return (lambda lib, x, y: _reduce(lib, op, x, d, keep, k)), [a, a], ["c", "c"], \
            dict(op=op, shape=shape, dt=dt, d=d, keep=keep, k=k), op not in EAGER_ONLY
    da, db = DTYPES[int(r.integers(len(DTYPES)))], DTYPES[int(r.integers(len(DTYPES)))]
    sa, sb = SHAPES[int(r.integers(len(SHAPES)))], SHAPES[int(r.integers(len(SHAPES)))]
    a, b = _arr(r, da, sa), _arr(r, db, sb)
    layouts = [str(r.choice(["c", "0d", "t", "s"])) if len(sa) == 2 else "c", str(r.choice(["c", "0d"]))]
    scalar, side = SCALARS[int(r.integers(len(SCALARS)))], int(r.integers(3))
    if kind == 0:
        name = sorted(BINARY)[int(r.integers(len(BINARY)))]

        def fn(lib, x, y):
            return BINARY[name](x, y) if side == 0 else BINARY[name](x, scalar) if side == 1 else \
                BINARY[name](scalar, x)
    elif kind == 1:
        name = FUNCTIONS[int(r.integers(len(FUNCTIONS)))]

        def fn(lib, x, y):
            return getattr(lib, name)(x, y)
    else:
        name = UNARY[int(r.integers(len(UNARY)))]

        def fn(lib, x, y):
            return _unary(lib, name, x)
    return fn, [a, b], layouts, dict(name=name, a=(da, sa), b=(db, sb), layouts=layouts, scalar=scalar, side=side), True


def _check(seed):
    fn, arrays, layouts, info, traceable = _program(seed)
    try:
        want = fn(torch, *[_tensor(torch, a, lay) for a, lay in zip(arrays, layouts)])
    except (RuntimeError, TypeError, ValueError, IndexError, ZeroDivisionError, NotImplementedError):
        return   # (what PyTorch refuses)
    for captured in (False, True) if traceable else (False,):
        what = f"seed {seed} {info} captured={captured}"
        f = tj.trace(lambda *a: fn(tj, *a), compiler="interpret") if captured else (lambda *a: fn(tj, *a))
        got = f(*[_tensor(tj, a, lay) for a, lay in zip(arrays, layouts)])
        _same(got, want, what)


@pytest.mark.parametrize("block", range(4))
def test_random_integer_bool_and_float64_ops_match_torch(block):
    for seed in range(block * 600, block * 600 + 600):
        _check(seed)
