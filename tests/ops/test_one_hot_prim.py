"""one_hot (ops/one_hot_prim.py): a 1 written at each index's flat position of zeros; the
result as PyTorch's for every rank, integer dtype, strided and empty inputs, and the
range check naming one_hot."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape, classes", [((), 4), ((7,), 3), ((3, 5), 11), ((2, 3, 4), 5),
                                            ((0, 3), 4), ((6, 2), -1)])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("compiled", [False, True])
def test_one_hot_matches_pytorch(shape, classes, dtype, compiled):
    rng = np.random.default_rng(sum(shape) + classes)
    idx = rng.integers(0, classes if classes > 0 else 9, shape).astype(dtype)   # (-1: inferred)

    def f(t):
        return tj.nn.functional.one_hot(t, classes)
    got = (tj.compile(f) if compiled and classes > 0 else f)(tj.tensor(idx))   # (-1: .item())
    want = torch.nn.functional.one_hot(torch.tensor(idx.astype(np.int64)), classes)
    assert got.dtype is tj.int64 and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_one_hot_of_a_strided_index_and_its_range_check():
    idx = np.arange(24).reshape(4, 6) % 5
    got = tj.nn.functional.one_hot(tj.tensor(idx)[:, ::2].t(), 5)
    want = torch.nn.functional.one_hot(torch.tensor(idx)[:, ::2].t(), 5)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    for bad in ([0, 5], [-1, 2]):
        with pytest.raises(IndexError, match="one_hot"):
            tj.nn.functional.one_hot(tj.tensor(bad), 5)
