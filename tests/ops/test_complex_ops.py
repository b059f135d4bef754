"""ops/complex_ops.py's functions on real tensors, against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_VALUES = [-0.0, float("nan"), float("-inf"), float("inf"), -1.5, 2.0, 0.0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "bool"])
def test_angle_of_real_values_as_torch(dtype):
    a = np.array([True, False]) if dtype == "bool" else np.array(_VALUES).astype(dtype, copy=False) \
        if dtype.startswith("float") else np.array([-3, 0, 4], dtype=dtype)
    want, got = torch.angle(torch.tensor(a)), tj.angle(tj.tensor(a))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())   # (NaN kept; -0.0's angle is 0)


@pytest.mark.parametrize("compiled", [False, True])
def test_angle_of_a_real_tensor_requires_grad_with_zero_gradient(compiled):
    a = np.array([1.0, -2.0, float("nan")], dtype=np.float32)
    tx, jx = torch.tensor(a, requires_grad=True), tj.tensor(a, requires_grad=True)

    def f(lib, x):
        return lib.angle(x * 2) + x
    want = f(torch, tx)
    got = (tj.compile(lambda x: f(tj, x)) if compiled else (lambda x: f(tj, x)))(jx)
    assert got.requires_grad and tj.angle(jx).requires_grad
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, equal_nan=True)
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
