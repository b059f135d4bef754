"""Comparison and logic records (ops/elementwise_logic.py) against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_logical_ops_of_numbers_give_booleans_inside_a_kernel(op):
    """logical_and(int, float) is True or False: a kernel's Python `and` returned the float
    operand itself to the ops fused after it (copysign's magnitude, a cast)."""
    i = np.array([-1, -5, 0, 2])
    x = np.array([-0.25, 1.5, -0.75, 0.0], np.float32)

    def f(m, i, x):
        r = getattr(m, op)(i, x)
        return m.copysign(r, x), r.float() * 3, getattr(m, op)(x, i).long()
    want = f(torch, torch.tensor(i), torch.tensor(x))
    got = tj.compile(lambda i, x: f(tj, i, x))(tj.tensor(i), tj.tensor(x))
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


def test_isclose_of_bool_tensors_compares_them():
    a, b = [True, False, True, False], [[True, True, False, False]]
    want = torch.isclose(torch.tensor(a), torch.tensor(b))
    np.testing.assert_array_equal(tj.isclose(tj.tensor(a), tj.tensor(b)).numpy(), want.numpy())


@pytest.mark.parametrize("compiled", [False, True])
def test_isclose_of_a_finite_value_and_an_infinity_is_false(compiled):
    inf, nan = float("inf"), float("nan")
    a = np.array([2.5, inf, -inf, 1.0, nan, 3.0, -inf, 1e38], np.float32)
    b = np.array([inf, inf, inf, 1.0 + 1e-6, nan, 3.0, -inf, inf], np.float32)

    def fn(m, a, b):
        return m.isclose(a, b), m.isclose(b, a, equal_nan=True), m.isclose(a, b, rtol=1.0, atol=1e30)

    want = fn(torch, torch.tensor(a), torch.tensor(b))
    got = (tj.compile(lambda a, b: fn(tj, a, b)) if compiled else lambda a, b: fn(tj, a, b))(tj.tensor(a), tj.tensor(b))
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()
    assert not tj.allclose(tj.tensor(a[:1]), tj.tensor(b[:1]))
