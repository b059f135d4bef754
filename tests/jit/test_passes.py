"""Graph passes (jit/passes.py): constant folding computes a comparison of Python numbers
in the operands' dtype, not in its bool result's (which made ``lt(1, 2)`` False)."""
import operator

import pytest

import tracejit as tj

# (tracejit's comparison of two numbers, operands): PyTorch takes no such call, so its
# side of the comparison is Python's
COMPARISONS = [("lt", operator.lt, 1, 2), ("lt", operator.lt, -1000, 0), ("gt", operator.gt, 0.5, -1000.0),
               ("eq", operator.eq, 1, 1.0), ("ne", operator.ne, 3, 3), ("ge", operator.ge, -2, 7)]


@pytest.mark.parametrize("name,py,a,b", COMPARISONS)
def test_a_folded_comparison_of_numbers_is_pythons(name, py, a, b):
    x = tj.tensor([100, -1, 3], dtype=tj.int16)
    fn = lambda x: tj.where(getattr(tj, name)(a, b), x, 0)   # noqa: E731
    want = x.tolist() if py(a, b) else [0, 0, 0]
    assert fn(x).tolist() == want
    assert tj.compile(fn)(x).tolist() == want


@pytest.mark.parametrize("divisor", [-1000, -3, 7])
def test_compiled_integer_trunc_division_by_a_number_matches_pytorch(divisor):
    torch = pytest.importorskip("torch")
    vals = [100, -1, 3, -128, 32766]
    want = torch.div(torch.tensor(vals, dtype=torch.int16), divisor, rounding_mode="trunc").tolist()
    fn = lambda x: tj.div(x, divisor, rounding_mode="trunc")   # noqa: E731
    assert fn(tj.tensor(vals, dtype=tj.int16)).tolist() == want
    assert tj.compile(fn)(tj.tensor(vals, dtype=tj.int16)).tolist() == want
