"""Tensor's operators (tracejit/tensor_operators.py) against PyTorch."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def test_in_asks_whether_any_element_equals():
    def answers(m):
        a = m.arange(12.0).reshape(3, 4)
        return [5.0 in a, 99 in a, m.tensor(3.0) in a, m.tensor([1.0, 100.0, 2.0, 3.0]) in a,
                True in (a > 3), False in (a >= 0)]

    assert answers(tj) == answers(torch)
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        "x" in tj.ones(2)
