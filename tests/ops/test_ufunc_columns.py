"""A plan's ufunc call over many short rows, a column at a time (ops/ufunc_columns.py):
numpy's values bit for bit, a C-contiguous result, and PyTorch's values through eager ops."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.ufunc_columns import COLUMNS_MAX, ROWS_MIN, columns

torch = pytest.importorskip("torch")

R = np.random.default_rng(0)
BIG = R.standard_normal((ROWS_MIN * 2, 8, 4)).astype(np.float32)
COL = R.standard_normal((ROWS_MIN * 2, 3)).astype(np.float32)
INTS = R.integers(-50, 50, (ROWS_MIN * 2, 1, 3)).astype(np.int32)
OFFS = R.integers(-50, 50, (1, 8, 3))


@pytest.mark.parametrize("u, ops", [
    (np.multiply, (BIG[:, 0, :2], BIG[:, 4, :2])),            # two strided operands
    (np.multiply, (BIG[:, 0, :2], COL[:, :1])),               # a strided column broadcast
    (np.subtract, (BIG[:, :, :3], BIG[:, :1, :3])),           # rows of 3, one operand broadcast
    (np.true_divide, (BIG[:, 1, :4], 3.0)),                   # a number
    (np.less, (BIG[:, 0, :2], BIG[:, 2, :2])),                # a bool result
    (np.add, (INTS, OFFS)),                                   # int32 with int64: int64
    (np.negative, (BIG[:, 3, :2],)),
    (np.multiply, (np.ascontiguousarray(BIG[:, 0, :2]), COL[None, 0, :2])),   # (1, 2): broadcast rows
])
def test_same_values_and_dtype_as_numpy(u, ops):
    shapes = tuple(np.shape(o) if isinstance(o, np.ndarray) else None for o in ops)
    call = columns(u, shapes)
    assert call is not None
    got, want = call(*ops), u(*ops)
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


def test_dense_operands_take_the_ufunc_itself():
    x = np.ascontiguousarray(BIG[:, 0, :2])
    call = columns(np.multiply, (x.shape, x.shape))
    got = call(x, x)
    np.testing.assert_array_equal(got, x * x)


@pytest.mark.parametrize("shapes", [
    ((ROWS_MIN - 1, 2), (ROWS_MIN - 1, 2)),                    # too few rows
    ((ROWS_MIN, COLUMNS_MAX + 1), (ROWS_MIN, COLUMNS_MAX + 1)),  # rows too long
    ((ROWS_MIN, 1), None),                                     # a column
    ((ROWS_MIN * 4,), (ROWS_MIN * 4,)),                        # one dim
    ((ROWS_MIN, 2), (ROWS_MIN, 3)),                            # no broadcast
])
def test_declines(shapes):
    assert columns(np.multiply, shapes) is None


def test_eager_ops_match_torch():
    def run(L):
        e, w = L.tensor(BIG), L.tensor(COL)
        a = L.tensor(BIG).requires_grad_(True)
        c = a[:, 0, :2] * (1 - w[:, 0:1]) + a[:, 4, :2] * w[:, 0:1]
        c.sum().backward()
        return c.detach(), e[:, 0, :2] < e[:, 2, :2], -e[:, 3, :2], a.grad
    for g, w in zip(run(tj), run(torch)):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(4096, 2), (300, 3), (256, 2, 4), (1000, 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_over_rows_of_few_columns_matches_torch(shape, keepdim):
    torch = pytest.importorskip("torch")
    from tracejit.ops.ufunc_columns import columns_sum
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    assert columns_sum(shape, keepdim, np.dtype(np.float32)) is not None
    x = tj.tensor(a, requires_grad=True)
    got = x.sum(0, keepdim=keepdim)
    want = torch.tensor(a).sum(0, keepdim=keepdim)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), a.astype(np.float64).sum(0, keepdims=keepdim), rtol=1e-6,
                               atol=1e-5)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-4)
    got.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(shape, np.float32))


def test_sum_over_rows_of_a_strided_array_and_of_many_columns_is_numpys():
    from tracejit.ops.ufunc_columns import columns_sum
    a = np.random.default_rng(4).standard_normal((600, 4)).astype(np.float32)
    assert columns_sum((600, 9), False, np.dtype(np.float32)) is None       # too many columns
    assert columns_sum((100, 2), False, np.dtype(np.float32)) is None       # too few rows
    call = columns_sum((600, 2), False, np.dtype(np.float32))
    strided = a[:, ::2]                                                      # not C-contiguous
    np.testing.assert_array_equal(call(strided), np.add.reduce(strided, axis=0))
    np.testing.assert_array_equal(tj.tensor(a)[:, ::2].sum(0).numpy(), np.add.reduce(strided, axis=0))
