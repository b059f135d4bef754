"""The user-level shape functions keep their normalized params per (input shape,
arguments) (ops/shape_params.py `normalized`): a kept entry must give the same result as the
first call and never let through an argument the function itself rejects."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError


def _x():
    return tj.tensor(np.arange(16, dtype=np.float32).reshape(4, 4))


def test_repeated_calls_give_the_first_calls_result():
    x = _x()
    for _ in range(3):
        np.testing.assert_array_equal(x.permute(1, 0).numpy(), np.arange(16).reshape(4, 4).T)
        np.testing.assert_array_equal(x.transpose(-1, 0).numpy(), np.arange(16).reshape(4, 4).T)
        assert x.reshape(2, -1).shape == (2, 8) and x.reshape((8, 2)).shape == (8, 2)
        assert x.reshape(-1).shape == (16,)
        assert tj.tensor(np.float32(3)).expand(2, 3).tolist() == [[3.0] * 3] * 2
        assert x[0:1].expand(3, -1).shape == (3, 4)


def test_identity_calls_return_a_new_view_of_the_input():
    x = _x()
    for _ in range(2):
        for y in (x.permute(0, 1), x.transpose(1, 1), x.reshape(4, 4), x.expand(4, 4)):
            assert y is not x and y.shape == x.shape and y._base is x
            assert np.shares_memory(y.numpy(), x.numpy())


def test_an_equal_argument_of_another_type_still_gets_the_functions_error():
    x = _x()
    assert x.reshape(2, 8).shape == (2, 8)      # (2, 8) kept
    with pytest.raises(TypeError, match="shape entries must be ints, got 2.0"):
        x.reshape(2.0, 8)                       # equal to 2 and hashes as 2
    with pytest.raises(TypeError, match="permute: dim must be an int"):
        x.permute(1.0, 0)


def test_numpy_ints_are_taken_as_pytorch_takes_them():
    torch = pytest.importorskip("torch")
    i1, i2 = np.int64(1), np.int32(2)
    got = []
    for m in (tj, torch):
        x = m.arange(12.0).reshape(3, 4)
        got.append([x.reshape(i2, -1).tolist(), x.view((i2, 6)).tolist(), x.permute(i1, 0).tolist(),
                    x.transpose(i1, 0).tolist(), x.unsqueeze(i1).shape, x.sum(i1).tolist(),
                    x.sum((i1,)).tolist(), [p.tolist() for p in x.split(2, i1)],
                    x.repeat(i2, 1).shape, x[None].expand(i2, 3, 4).shape])
    got[0][4], got[0][8], got[0][9] = (tuple(got[0][k]) for k in (4, 8, 9))
    got[1][4], got[1][8], got[1][9] = (tuple(got[1][k]) for k in (4, 8, 9))
    assert got[0] == got[1]


def test_an_error_is_raised_every_time_and_the_shape_decides():
    x = _x()
    for _ in range(2):
        with pytest.raises(ShapeError):
            x.reshape(3, 5)
        with pytest.raises(ShapeError):
            x.expand(2, 4)
    # the same arguments on another shape are normalized for that shape
    assert tj.tensor(np.zeros((2, 8), np.float32)).reshape(-1, 4).shape == (4, 4)
    assert x.reshape(-1, 4).shape == (4, 4)
    assert tj.tensor(np.zeros((1, 4), np.float32)).expand(4, 4).shape == (4, 4)
    with pytest.raises(ShapeError):
        tj.tensor(np.zeros((3, 4), np.float32)).expand(4, 4)


def test_view_keeps_reshapes_params_and_still_refuses_to_copy():
    x = _x()
    for _ in range(2):
        assert x.view(2, -1).shape == (2, 8) and x.view(4, 4)._base is x
        with pytest.raises(ShapeError, match="view: shape \\(16,\\) is not compatible"):
            x.t().view(16)          # same shape, kept params: the stride check still runs
        assert x.view(16).tolist() == list(range(16))


def test_shape_arguments_by_keyword_as_pytorch_names_them():
    torch = pytest.importorskip("torch")
    for m in (tj, torch):
        x = m.arange(6.0).view(2, 3)
        got = [x.reshape(shape=(3, 2)).tolist(), m.reshape(x, shape=(-1,)).tolist(),
               x.view(size=(3, 2)).tolist(), x.expand(size=(2, 2, 3)).shape, x.permute(dims=(1, 0)).tolist(),
               m.permute(x, dims=(1, 0)).tolist(), x.repeat(repeats=(1, 2)).tolist(),
               x.view(dtype=m.int32).dtype == m.int32]
        if m is tj:
            mine = got
    assert [tuple(v) if i == 3 else v for i, v in enumerate(mine)] == \
        [tuple(v) if i == 3 else v for i, v in enumerate(got)]
    with pytest.raises(TypeError, match="multiple values for argument 'shape'"):
        _x().reshape((2, 8), shape=(8, 2))


@pytest.mark.parametrize("dims", [0, -1, (0,), ()])
def test_flip_of_a_0d_tensor_is_a_copy(dims):
    torch = pytest.importorskip("torch")
    x = tj.tensor(2.5, requires_grad=True)
    y = x.flip(dims)
    assert y.ndim == 0 and y.item() == torch.tensor(2.5).flip(dims).item()
    (y * 3).backward()
    assert x.grad.item() == 3.0
    with pytest.raises(Exception, match="flip"):
        tj.tensor(2.5).flip(1)


def test_shape_functions_take_0d_integer_tensors_as_sizes():
    torch = pytest.importorskip("torch")

    def shapes(m):
        x, n = m.arange(12.0), m.tensor(3)
        return [x.reshape(n, -1).shape, x.view(2, m.tensor(6)).shape, x[:2].expand(n, 2).shape,
                x[:2].repeat(n).shape, x.reshape(4, 3).tile((m.tensor(2), 1)).shape]

    assert [tuple(s) for s in shapes(tj)] == [tuple(s) for s in shapes(torch)]
    with pytest.raises(TypeError, match="reshape"):
        tj.arange(4.0).reshape(tj.tensor(2.0), -1)


@pytest.mark.parametrize("op", ["expand", "repeat", "tile"])
def test_a_changing_int_size_argument_stays_symbolic_when_compiled(op):
    """``x.expand(n, -1)``, ``x.repeat(n, 1)`` and ``x.tile((n, 1))`` with a new `n` on each
    call: one capture for every n >= 2 (the int read as a size, not specialized per value)."""
    torch = pytest.importorskip("torch")
    f = {"expand": lambda x, n: x.expand(n, -1) * 2, "repeat": lambda x, n: x.repeat(n, 1) * 2,
         "tile": lambda x, n: x.tile((n, 1)) * 2}[op]
    cf = tj.compile(f)
    v = np.arange(3, dtype=np.float32).reshape(1, 3)
    for n in (2, 3, 4, 5, 7, 9):
        x, xt = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = cf(x, n), f(xt, n)
        np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
        (y * y).sum().backward(), (yt * yt).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
