"""roll (ops/roll_prim.py): int shifts as one primitive each way; values and gradients as
PyTorch's for several dims, negative, whole-turn and repeated shifts, strided inputs."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

CASES = [((3, -5), (0, 1)), (7, 1), ((2, 3), (1, 1)), (4, None), ((9,), (-1,)), ((6, 0), (0, 1)),
         ((-13, 2, 1), (2, 0, 1))]


@pytest.mark.parametrize("shifts, dims", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True])
def test_roll_values_and_gradients_match_pytorch(shifts, dims, dtype, compiled):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5, 7)).astype(dtype)
    g = rng.standard_normal((6, 5, 7)).astype(dtype)
    got = []
    for lib in (tj, torch):
        xt = lib.tensor(x, requires_grad=True)

        def f(v):
            return lib.roll(v * 2.0, shifts, dims)
        out = (tj.compile(f) if compiled and lib is tj else f)(xt)
        out.backward(lib.tensor(g))
        got.append((out.detach().numpy(), xt.grad.numpy()))
    for a, b in zip(*got):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_roll_of_a_strided_view_and_of_ints_is_new_row_major_memory():
    x = np.arange(60).reshape(4, 15)
    for v in (x[:, ::2], x.T, x.astype(bool)):
        got = tj.roll(tj.tensor(v), (1, -2), (0, 1))
        assert got.is_contiguous()
        want = torch.roll(torch.tensor(v.copy()), (1, -2), (0, 1)).numpy()
        np.testing.assert_array_equal(got.numpy(), want)
    src = tj.tensor(x)
    out = tj.roll(src, 4, 0)   # (a whole turn: a copy still, as PyTorch's)
    src.add_(1)
    np.testing.assert_array_equal(out.numpy(), x)


def test_roll_under_vmap_rolls_each_sample():
    x = np.random.default_rng(1).standard_normal((3, 4, 5))
    got = tj.func.vmap(lambda v: tj.roll(v, (1, 2), (0, -1)))(tj.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.roll(x, (1, 2), (1, 2)))
