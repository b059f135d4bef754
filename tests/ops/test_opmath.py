"""Half precision computed as PyTorch's CPU kernels compute it: each float16 elementwise
primitive in float32 with one rounding of its result (a Python float operand kept at
float32 precision), and the activation composites in float32 as a whole (ops/opmath.py),
in eager mode and compiled. Results are checked against float64 references: correctly
rounded means within half a unit in the last place (plus float32's own error)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit import bf16

_X = (np.random.default_rng(0).standard_normal(4001) * 4).astype(np.float32)
_HALF_ULP = 0.5 + 2.0 ** -10    # (the float32 computation's error, in units of the result's)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(x))


_SELU_A, _SELU_S = 1.6732632423543772, 1.0507009873554805

# name -> (tracejit call, float64 reference)
_CASES = {
    "sigmoid": (tj.sigmoid, _sigmoid),
    "rsqrt": (lambda x: tj.rsqrt(x.abs()), lambda x: 1.0 / np.sqrt(np.abs(x))),
    "tan": (tj.tan, np.tan),
    "silu": (F.silu, lambda x: x * _sigmoid(x)),
    "mish": (F.mish, lambda x: x * np.tanh(_softplus(x))),
    "elu": (F.elu, _elu),
    "celu": (lambda x: F.celu(x, 2.0), lambda x: np.where(x > 0, x, 2.0 * np.expm1(x / 2.0))),
    "selu": (F.selu, lambda x: _SELU_S * _elu(x, _SELU_A)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0),
    "softsign": (F.softsign, lambda x: x / (1.0 + np.abs(x))),
    "mul_python_float": (lambda x: x * 0.1, lambda x: x * np.float64(np.float32(0.1))),
    "softmax": (lambda x: F.softmax(x.reshape(-1, 1)[:4000].reshape(40, 100), -1),
                lambda x: _softmax_rows(x[:4000].reshape(40, 100))),
    "log_softmax": (lambda x: F.log_softmax(x.reshape(-1, 1)[:4000].reshape(40, 100), -1),
                    lambda x: np.log(_softmax_rows(x[:4000].reshape(40, 100)))),
}


def _softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _ulps(got, want, dtype) -> float:
    """The largest error of `got` in units in the last place of `want` rounded to `dtype`
    (the smallest subnormal's spacing below the normal range)."""
    got = np.asarray(got, np.float64)
    if dtype == "float16":
        spacing = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
        spacing = np.maximum(spacing, 2.0 ** -24)
    else:
        spacing = np.maximum(np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) * 2.0 ** 16,
                             2.0 ** -133)
    return float(np.max(np.abs(got - want) / spacing))


def _ulps_at(v, dtype):
    """One unit in the last place of `dtype` at magnitude `v`."""
    if dtype == "float16":
        return np.maximum(np.spacing(np.abs(v).astype(np.float16)).astype(np.float64), 2.0 ** -24)
    return np.maximum(np.spacing(np.abs(v).astype(np.float32)).astype(np.float64) * 2.0 ** 16, 2.0 ** -133)


def _rounded_input(dtype):
    x = tj.tensor(_X).to(getattr(tj, dtype))
    return x, x.float().numpy().astype(np.float64)


@pytest.mark.parametrize("name", sorted(_CASES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_results_are_correctly_rounded(name, dtype):
    if dtype == "bfloat16" and name == "tan":
        pytest.skip("tan of bf16 inputs up to 16 is ill-conditioned near its poles")
    fn, ref = _CASES[name]
    x, xd = _rounded_input(dtype)
    want = ref(xd)
    y = fn(x)
    assert y.dtype is getattr(tj, dtype)
    assert _ulps(y.float().numpy(), want, dtype) <= _HALF_ULP
    compiled = tj.compile(lambda v: fn(v) * 1.0)(x)
    np.testing.assert_array_equal(compiled.float().numpy(), y.float().numpy())


def test_float16_arithmetic_rounds_once():
    # numpy's float16 sigmoid rounds exp, the sum and the quotient: a third of the results
    # were 1 ulp off; a float operand was rounded to float16 first (0.1 -> 0.0999755859375)
    x, xd = _rounded_input("float16")
    y = (x * 0.1).numpy()
    np.testing.assert_array_equal(y, (xd.astype(np.float32) * np.float32(0.1)).astype(np.float16))
    s = tj.sigmoid(x).numpy()
    np.testing.assert_array_equal(s, _sigmoid(xd.astype(np.float32)).astype(np.float16))


def test_nextafter_keeps_float16_steps():
    # its result is a step of the operand's own format: never widened
    one = tj.tensor(np.array([1.0], np.float16))
    assert tj.nextafter(one, one * 2).item() == 1.0 + 2.0 ** -10


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["silu", "mish", "elu", "selu", "hardswish", "softmax"])
def test_half_precision_gradients_are_computed_in_float32(name, dtype, monkeypatch):
    # (both gradients by the ops' numpy forms: a float32 op over enough elements may run
    # its scalar rule as a kernel, whose math functions differ from numpy's in last bits)
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    fn, _ = _CASES[name]
    x, xd = _rounded_input(dtype)
    g = tj.tensor(np.random.default_rng(1).standard_normal(tuple(fn(x).shape)).astype(np.float32))
    x.requires_grad_()
    fn(x).backward(g.to(x.dtype))
    # exactly the float32 computation's gradient, rounded once
    x32 = tj.tensor(xd.astype(np.float32)).requires_grad_()
    fn(x32).backward(g.to(x.dtype).float())
    np.testing.assert_array_equal(x.grad.float().numpy(), x32.grad.to(x.dtype).float().numpy())
    wide = tj.tensor(xd).requires_grad_()      # float64: the reference
    fn(wide).backward(g.to(x.dtype).double())
    want = wide.grad.numpy()
    if name == "softmax":
        # y * (g - sum(g * y)) cancels: float32's error is one of the row's scale, which can
        # be many ulps of a tiny element (how many depends on the machine's float32 exp)
        scale = np.abs(want[:4000].reshape(40, 100)).max(-1, keepdims=True)
        err = np.abs(x.grad.float().numpy().astype(np.float64) - want)[:4000].reshape(40, 100)
        assert (err <= 2.0 * _ulps_at(scale, dtype)).all()
        assert not x.grad[4000:].float().numpy().any()     # (the element left out of the rows)
    else:   # one rounding of a float32 computation (silu's derivative cancels near -1.28: 1 ulp)
        assert _ulps(x.grad.float().numpy(), want, dtype) <= 1.0


def test_expm1_gradient_keeps_its_digits_where_the_result_is_near_minus_one():
    x = tj.tensor(np.array([-11.0, -16.0, -3.0, 0.5], np.float32), requires_grad=True)
    tj.expm1(x).sum().backward()
    want = np.exp(np.array([-11.0, -16.0, -3.0, 0.5]))
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=2e-7)
    y = tj.tensor(np.array([-12.0], np.float32), requires_grad=True)
    F.elu(y).backward()
    assert math.isclose(y.grad.item(), math.exp(-12.0), rel_tol=2e-7)


def test_bf16_composites_round_once():
    x, xd = _rounded_input("bfloat16")
    got = F.silu(x).float().numpy()
    np.testing.assert_array_equal(got, bf16.to_float32(bf16.to_bfloat16(
        (xd * _sigmoid(xd)).astype(np.float32))))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_mean_divides_the_float32_sum_and_rounds_once(dtype):
    r = np.random.default_rng(2)
    x = tj.tensor(r.random((6, 3001)).astype(np.float32)).to(getattr(tj, dtype))
    wide = x.float().numpy().astype(np.float64)
    for got in (x.mean(-1), tj.compile(lambda v: v.mean(-1))(x)):
        assert got.dtype is x.dtype
        assert _ulps(got.float().numpy(), wide.mean(-1), dtype) <= _HALF_ULP
