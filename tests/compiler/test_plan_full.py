"""A CPU plan's `full` (compiler/plan.py): every call returns a fresh array of the value,
whatever its size, and the seed gradient of a compiled loss gives eager's gradients."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


@pytest.mark.parametrize("shape,value,dtype", [((), 1, tj.float32), ((3, 4), -2.5, tj.float64),
                                               ((7,), 0, tj.float32), ((2,), True, tj.bool_)])
def test_a_small_full_is_a_fresh_copy_of_its_value(shape, value, dtype):
    def f(x):
        return x * 2, tj.full(shape, value, dtype=dtype)
    cf = tj.script(f)
    x = tj.tensor(np.arange(6, dtype=np.float32))
    first = cf(x)[1]
    want = np.full(shape, value, dtype=dtype.np)
    np.testing.assert_array_equal(first.numpy(), want)
    assert first.dtype is dtype and first.numpy().flags.writeable
    first.numpy()[...] = 7          # the caller owns it: the next call's value is unchanged
    second = cf(x)[1]
    np.testing.assert_array_equal(second.numpy(), want)
    assert not np.shares_memory(first.numpy(), second.numpy())


def test_a_large_full_is_a_fresh_array_per_call():
    n = 1000

    def f(x):
        return x + 1, tj.full((n,), 3.0)
    cf = tj.script(f)
    x = tj.tensor(np.zeros(4, np.float32))
    first, second = cf(x)[1], cf(x)[1]
    np.testing.assert_array_equal(first.numpy(), np.full(n, 3.0, np.float32))
    assert not np.shares_memory(first.numpy(), second.numpy())


def test_the_seed_gradient_of_a_compiled_loss():
    """The loss's seed gradient (ones of shape ()): gradients equal eager's over repeated
    calls."""
    r = np.random.default_rng(0)
    xs, ws = r.standard_normal((8, 5)).astype(np.float32), r.standard_normal((5, 3)).astype(np.float32)

    def loss(x, w):
        return x.mm(w).pow(2).sum()
    cf = tj.script(loss)
    for fn in (loss, cf, cf, cf):
        w = tj.tensor(ws, requires_grad=True)
        fn(tj.tensor(xs), w).backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * xs.T @ (xs @ ws), rtol=1e-5)


@pytest.mark.parametrize("value", [-np.inf, np.nan])
def test_a_plan_step_takes_an_infinite_or_nan_number(value):
    # (the plan's source had no literal for it: a NameError at the first call)
    f = tj.compile(lambda x: x.index_fill(0, tj.tensor([1]), value))
    np.testing.assert_array_equal(f(tj.tensor([1.0, 2.0, 3.0])).numpy(), [1.0, value, 3.0])
