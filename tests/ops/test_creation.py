"""arange's PyTorch rules for integer dtypes and float rounding, and empty_strided."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

CASES = [((0.5, 4.5, 1), "int64"), ((0, 5, 1.5), "int64"), ((2.7,), "int64"), ((-1.5, 3), "int32"),
         ((0, 5, 1.5), "int16"), ((5, 0, -1.5), "int32"), ((10,), "uint8"), ((0, 1, 0.3), None),
         ((0, 10, 3), "float32"), ((0.0, 1.0, 0.1), "float64"), ((0, 2, 0.1), "float16"),
         ((0, 2, 0.1), "bfloat16"), ((3, 0, -0.7), None), ((1, 11, 2), None)]


@pytest.mark.parametrize("args, dtype", CASES)
def test_arange_matches_pytorch(args, dtype):
    ref = torch.arange(*args, **({"dtype": getattr(torch, dtype)} if dtype else {}))
    out = tj.arange(*args, **({"dtype": getattr(tj, dtype)} if dtype else {}))
    assert str(out.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1]
    assert out.tolist() == ref.tolist()   # exact: one rounding from double, as PyTorch


def test_an_integer_step_that_truncates_to_zero_is_refused():
    with pytest.raises(ValueError, match="step must be nonzero"):
        tj.arange(1, 4, 0.5, dtype=tj.int64)


def test_empty_strided_has_the_size_and_dtype():
    t = tj.empty_strided((2, 3), (1, 2), dtype=tj.float64)
    assert tuple(t.shape) == (2, 3) and t.dtype == tj.float64 and t.stride() == (3, 1)


def test_tensor_of_lists_takes_the_values_of_tensors_at_any_depth():
    assert tj.tensor([1, 2, 3]).tolist() == [1, 2, 3]
    assert tj.tensor([[1, tj.tensor(2)], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert tj.tensor(([1.5], (tj.tensor(2.5),))).tolist() == [[1.5], [2.5]]
    assert tj.tensor([True, False]).dtype == tj.bool and tj.tensor([1, 2.5]).dtype == tj.float32
