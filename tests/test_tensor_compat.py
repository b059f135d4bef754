"""Tensor methods of tensor_compat.py, against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_apply_replaces_each_element_by_the_callables_value_in_place(dtype):
    a = np.array([[0.2, 0.7, 3.0], [0.5, 0.1, -2.0]]).astype(dtype)
    binarize = lambda v: 0 if v < 0.5 else 1 + v   # noqa: E731 (pytorch-ntm's idiom)
    t, j = torch.from_numpy(a.copy()), tj.tensor(a.copy())
    version = j._version
    assert j.apply_(binarize) is j and j._version > version
    assert j.dtype == getattr(tj, dtype)
    np.testing.assert_array_equal(j.numpy(), t.apply_(binarize).numpy())


def test_apply_on_a_view_writes_through_to_its_base():
    j = tj.zeros(2, 3)
    j[1].apply_(lambda v: v + 5)
    assert j.tolist() == [[0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]
