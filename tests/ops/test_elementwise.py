"""Elementwise records' public functions (ops/elementwise.py) against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype,values", [("uint8", [0, 1, 7, 200, 255]), ("int8", [-100, -7, 0, 5, 100]),
                                          ("int16", [-7, 7, 300])])
def test_rounding_div_wraps_a_python_int_into_the_dtype_first(mode, dtype, values):
    """PyTorch divides in the tensor's dtype: -3 is 253 for uint8, 200 is -56 for int8."""
    x = np.array(values, dtype)
    divide = tj.compile(lambda a, d: tj.div(a, d, rounding_mode=mode), backend="interpret")
    for d in (-3, 200, -200, 300, 3):
        want = torch.div(torch.tensor(x), d, rounding_mode=mode)
        assert tj.div(tj.tensor(x), d, rounding_mode=mode).tolist() == want.tolist(), d
        assert divide(tj.tensor(x), d).tolist() == want.tolist(), d   # d a runtime input
        zero_d = torch.div(torch.tensor(x), torch.tensor(d), rounding_mode=mode)
        assert tj.div(tj.tensor(x), tj.tensor(d), rounding_mode=mode).tolist() == zero_d.tolist(), d
    nz = x[x != 0]
    want = torch.div(-3, torch.tensor(nz), rounding_mode=mode)
    assert tj.div(-3, tj.tensor(nz), rounding_mode=mode).tolist() == want.tolist()
