"""Compiled (numba) vs eager vs the IR interpreter: every op of the op database, and the
inputs that break code generators (strides, aliases, empty and 0-d tensors, inf/nan,
integer and bool dtypes, Python scalars).

Comparison rules (values, dtypes, nan/inf positions, ``None`` gradients) and tolerances
are those of `differential.assert_compiled_matches`.

The default run takes the first sample of every op in float32 and in float64 (or in its
first dtype when it has no floating one): about two minutes, nearly all of it numba
compiling kernels. ``python -m pytest -m slow tests/compiler`` runs every sample of
every op in every dtype it lists (about 25 minutes from a cold kernel cache).
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from opdb import OPS
from tracejit.errors import TraceError
from differential import assert_compiled_matches, assert_same
from inputs import T, gelu


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


CHECKED = [op for op in OPS if op.traceable and not op.random]


def _data_dependent(s) -> bool:
    """Samples whose output shape depends on values: capture must refuse them."""
    return s.op.name == "one_hot" and s.kwargs.get("num_classes", -1) < 0


def _check_sample(s, dtype):
    ts = s.tensors(requires_grad=s.op.grad and dtype.is_floating_point)
    if _data_dependent(s):
        with pytest.raises(TraceError):
            tj.trace(s.fn)(*ts)
        return
    try:
        assert_compiled_matches(s.fn, *ts)
    except AssertionError as exc:
        raise AssertionError(f"{s!r} [{dtype.name}]\n{exc}") from None


def _default_dtypes(op):
    return [d for d in op.dtypes if d in (tj.float32, tj.float64)] or [op.dtypes[0]]


@pytest.mark.parametrize("op", CHECKED, ids=[op.name for op in CHECKED])
def test_op_compiled_matches_eager(op):
    for dtype in _default_dtypes(op):
        _check_sample(op.sample_inputs(dtype, np.random.default_rng(0))[0], dtype)


@pytest.mark.slow
@pytest.mark.parametrize("op", CHECKED, ids=[op.name for op in CHECKED])
def test_op_compiled_matches_eager_every_sample(op):
    for dtype in op.dtypes:
        for s in op.sample_inputs(dtype, np.random.default_rng(0)):
            _check_sample(s, dtype)


RANDOM = [op for op in OPS if op.random and op.traceable]
UNTRACEABLE = [op for op in OPS if not op.traceable]


@pytest.mark.parametrize("op", RANDOM, ids=[op.name for op in RANDOM])
def test_random_op_compiled_gives_shapes_and_dtypes_of_eager(op):
    for dtype in _default_dtypes(op):
        s = op.sample_inputs(dtype, np.random.default_rng(0))[0]
        ts = s.tensors(requires_grad=op.grad)
        eager_out, compiled_out = s.fn(*ts), tj.trace(s.fn)(*ts)
        pairs = zip(compiled_out if isinstance(compiled_out, tuple) else (compiled_out,),
                    eager_out if isinstance(eager_out, tuple) else (eager_out,))
        for c, e in pairs:
            assert tuple(c.shape) == tuple(e.shape) and c.dtype is e.dtype and c.requires_grad == e.requires_grad


@pytest.mark.parametrize("op", UNTRACEABLE, ids=[op.name for op in UNTRACEABLE])
def test_data_dependent_op_is_refused_by_the_compiled_path(op):
    s = op.sample_inputs(op.dtypes[0], np.random.default_rng(0))[0]
    with pytest.raises(TraceError):
        tj.trace(s.fn)(*s.tensors())


# --------------------------------------------------------------------------- inputs


def chain_sum(x, y):
    return (tj.exp(x * 0.5) * y - y).sum(0)


VIEWS = {
    "transposed": (lambda x: x.t(), (6, 5)),
    "step-slice": (lambda x: x[::2, 1::2], (10, 12)),
    "negative-stride": (lambda x: x.flip(0), (5, 6)),
    "expanded": (lambda x: x.expand(5, 6), (1, 6)),
    "expanded-col": (lambda x: x.expand(5, 6), (5, 1)),
    "permuted-3d": (lambda x: x.permute(2, 0, 1)[1], (5, 6, 3)),
    "offset-slice": (lambda x: x[1:, 2:], (6, 8)),
}


@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_non_contiguous_inputs(view, dtype):
    make, base = VIEWS[view]
    x, y = T(*base, seed=1, dtype=dtype), T(5, 6, seed=2, dtype=dtype)
    assert_compiled_matches(chain_sum, x, y, prep=lambda x, y: (make(x), y))
    # The same compiled function serves contiguous and strided calls of one signature.
    cf = tj.trace(chain_sum)
    cont = T(5, 6, seed=3, dtype=dtype)
    assert_compiled_matches(chain_sum, cont, y, compiled=cf, interpreter=False, calls=1)
    assert_compiled_matches(chain_sum, x, y, prep=lambda x, y: (make(x), y), compiled=cf, interpreter=False,
                            calls=1)


def test_broadcast_view_from_numpy_is_read_only_and_works():
    a = np.broadcast_to(np.arange(6, dtype=np.float32), (4, 6))
    x = tj.Tensor._wrap(a, tj.float32)
    assert_compiled_matches(lambda x, y: tj.tanh(x * y) + x, x, T(4, 6, seed=4))


def test_aliased_inputs():
    x = T(4, 6, seed=1)
    assert_compiled_matches(gelu, x, x, x)
    assert_compiled_matches(lambda a, b: (a * b - a).sum(1), x, x)
    # An alias and an overlapping view of the same storage.
    assert_compiled_matches(lambda a, b: a * 2.0 + b, x, x, prep=lambda a, b: (a[:, :3], b[:, 3:]))


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (2, 0, 3)], ids=str)
def test_empty_tensors(shape):
    x, y, z = T(*shape, seed=1), T(*shape, seed=2), T(*shape, seed=3)
    assert_compiled_matches(gelu, x, y, z)
    assert_compiled_matches(lambda x, y: ((x - y) ** 2).sum(), x, y)
    assert_compiled_matches(lambda x, y: (x * y).sum(-1), x, y)


def test_empty_reduction_of_max_raises_like_eager():
    x = T(3, 0, seed=1)
    with pytest.raises(RuntimeError, match="zero-size") as eager_err:
        (x * 2.0).amax(1)
    with pytest.raises(type(eager_err.value), match="zero-size"):
        tj.trace(lambda x: (x * 2.0).amax(1))(x)


SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0],
                    [3.0e38, -3.0e38, 1e-30, -1e-30, 88.0, -104.0]])


# Grouped so that each group is one fused kernel (numba compile time), but kept apart
# where one output's nan gradient would hide the others' in the shared input gradient.
SPECIAL_FNS = {
    "exp-tanh-sigmoid": lambda x, y: (tj.exp(x) * y + tj.tanh(x), tj.sigmoid(x) - y, tj.expm1(x * y)),
    "log-sqrt-div-erf": lambda x, y: (tj.log(tj.abs(x)) * y, tj.sqrt(x) + x / y, tj.erf(x) * y, x ** 2.5),
    "select": lambda x, y: (tj.maximum(x, y) + tj.minimum(x, y * 2.0), tj.where(x > 0, x, y),
                            x.clamp(-1.0, 1.0) * y, tj.relu(x) * y),
    "reductions": lambda x, y: ((x * y).sum(1), (x * y).amax(1), (x - y).amin(0), (x * y).sum()),
    "softmax": lambda x, y: tj.softmax(x * y, 1),
}


@pytest.mark.parametrize("fns", list(SPECIAL_FNS), ids=list(SPECIAL_FNS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_inf_nan_propagate_to_the_same_positions(dtype, fns):
    x = tj.tensor(SPECIAL.astype(dtype)).requires_grad_()
    y = tj.tensor(np.linspace(0.25, 2.0, 12).reshape(2, 6).astype(dtype)).requires_grad_()
    assert_compiled_matches(SPECIAL_FNS[fns], x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_reduction_kernels_keep_ieee_semantics_of_their_elementwise_part(dtype):
    """Reduction kernels are compiled with fastmath 'reassoc' (to vectorize the sum); it
    must not reach the fused elementwise work, where LLVM would rewrite x - 0.5*x as
    0.5*x and turn -inf - -inf = nan into -inf."""
    x = tj.tensor(np.array([[-np.inf, 1.0, np.inf], [2.0, -3.0, 4.0]], dtype))
    fns = [lambda x: (x - 0.5 * x).sum(), lambda x: (x - 0.5 * x).amax(1),
           lambda x: (x * 3.0 - x * 2.0).sum(0), lambda x: ((x + 1.0) - x).prod()]
    for f in fns:
        assert_compiled_matches(f, x)                                        # flat kernels
        assert_compiled_matches(f, x, prep=lambda x: (x.t().contiguous().t(),))  # nested kernels


def test_zero_dim_tensors():
    a, b, c = T(seed=1), T(seed=2), T(seed=3)
    assert_compiled_matches(gelu, a, b, c)
    assert_compiled_matches(lambda a, v: (a * v).sum() + a, a, T(4, seed=4))
    assert_compiled_matches(lambda a, v: tj.exp(v - a).amax(), a, T(3, 2, seed=5))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_integer_dtypes_through_fused_kernels(dtype):
    rng = np.random.default_rng(3)
    a = tj.tensor(rng.integers(1, 9, (4, 5)).astype(dtype))
    b = tj.tensor(rng.integers(1, 9, (4, 5)).astype(dtype))
    assert_compiled_matches(lambda a, b: ((a * b + 3) * 2 - a, (a * b).sum(1)), a, b)
    if dtype in ("int32", "int64"):
        assert_compiled_matches(lambda a, b: (tj.where(a > b, a, b) + tj.maximum(a, b), (a - b).amax(0)), a, b)
        assert_compiled_matches(lambda a, b: ((a // b) + (a % b), a / b + 1.0), a, b)  # true division: floats


def test_integer_to_negative_power_raises_like_eager():
    x = tj.tensor(np.array([1, 2, 3], np.int64))
    with pytest.raises(RuntimeError, match="negative integer powers") as eager:
        (x * 2) ** -2
    with pytest.raises(type(eager.value), match="negative integer powers"):
        tj.trace(lambda x: (x * 2) ** -2)(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_infinite_and_nan_constant_exponents(dtype):
    # A constant exponent that is not a small integer goes through pow; inf once made
    # the code generator fail converting it to an int.
    x = tj.tensor(np.array([0.0, 0.5, 1.0, 2.0, np.inf, np.nan], dtype))
    for e in (float("inf"), float("-inf"), float("nan"), 4.0, -3.0):
        assert_compiled_matches(lambda x, e=e: (x * 1.5) ** e, x)


def test_bool_through_fused_kernels():
    x, y = T(4, 5, seed=1, rg=False), T(4, 5, seed=2, rg=False)
    assert_compiled_matches(lambda x, y: (x > 0) & (y < 0) | (x == y), x, y)
    assert_compiled_matches(lambda x, y: ((x > y) | (y > 1.0)).sum(0), x, y)
    assert_compiled_matches(lambda x, y: tj.logical_not(x > y) * 1.5 + x, x, y)


def test_mixed_dtypes_promote_like_eager():
    f32, f64 = T(3, 4, seed=1), T(3, 4, seed=2, dtype=np.float64)
    i64 = tj.tensor(np.arange(12).reshape(3, 4))
    assert_compiled_matches(lambda a, b, i: a * b + i, f32, f64, i64)
    assert_compiled_matches(lambda a, i: (a * i).sum() + 1, f32, i64)


def script_scale(x, a, n, flag):
    y = x * a + n
    if flag:
        y = y * 2.0
    return y.sum(1)


def test_python_scalar_script_arguments_are_runtime_inputs():
    cf = tj.script(script_scale)
    x = T(3, 4, seed=1)
    for a, n, flag in ((2.5, 3, True), (-1.0, 0, False), (0.5, -7, True)):
        assert_compiled_matches(script_scale, x, a, n, flag, mode="script", compiled=cf, calls=1)
    # values of int/float arguments are not guarded; the bool flag is specialized (one
    # entry for True, one for False)
    assert cf.cache_stats()["compiles"] == 2
    with tj.no_grad():
        out = cf(x, 2, 1, 1)
        assert_same(out, script_scale(x.detach(), 2, 1, 1), "int for float argument")


def test_integer_division_by_zero_raises_compiled_as_eagerly():
    def f(a, b):
        return (a // b) * 2 + a % b

    a, b = tj.tensor([7, -7, 9]), tj.tensor([2, 3, 4])
    cf = tj.trace(f)
    assert cf(a, b).tolist() == f(a, b).tolist()
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        f(a, tj.tensor([2, 0, 4]))
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        cf(a, tj.tensor([2, 0, 4]))
    x = tj.tensor([1.0, -1.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        assert tj.trace(lambda x, y: x // y)(x, tj.zeros(2)).tolist() == [float("inf"), float("-inf")]


@pytest.mark.parametrize("fn", [lambda x: -3 % x, lambda x: x - 300, lambda x: 1000 // x])
def test_out_of_range_int_literals_wrap_in_a_compiled_plan(fn):
    """As eager (and PyTorch) wrap them into the integer result's dtype; numpy refused the
    Python int in the plan's call."""
    torch = pytest.importorskip("torch")
    a = np.array([5, 7, 1], np.uint8)
    got = tj.trace(fn, compile="sync")(tj.tensor(a))
    np.testing.assert_array_equal(got.numpy(), fn(torch.tensor(a)).numpy())
    np.testing.assert_array_equal(got.numpy(), fn(tj.tensor(a)).numpy())
