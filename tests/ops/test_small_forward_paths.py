"""cast, argmax/argmin along a dim, flatten, cat and stack give numpy's values and PyTorch's dtypes
and shapes on every call (the first makes the eager plan, the next ones run through it)."""
import numpy as np
import pytest

import tracejit as tj

X = np.array([[1.5, np.nan, -0.0, 3.0], [2.0, 2.0, -1.0, 0.0], [np.inf, -np.inf, 0.0, 7.0]], np.float32)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_along_a_dim_match_torch(name, dim, keepdim):
    torch = pytest.importorskip("torch")
    want = getattr(torch.from_numpy(X), name)(dim=dim, keepdim=keepdim)
    for _ in range(3):
        got = getattr(tj.tensor(X), name)(dim=dim, keepdim=keepdim)
        assert got.dtype is tj.int64 and tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_arg_reductions_of_whole_and_0d_tensors():
    for _ in range(2):
        assert tj.tensor(X).argmax().item() == 1     # the nan, as numpy and PyTorch
        assert tj.tensor([3.0, 1.0]).argmin(dim=0).item() == 1
        z = tj.tensor(2.5).argmax(dim=0, keepdim=True)
        assert z.shape == () and z.item() == 0


@pytest.mark.parametrize("src", [np.float64, np.float32, np.int64, np.int32, np.bool_, np.float16])
@pytest.mark.parametrize("to", [tj.float32, tj.float64, tj.int64, tj.bool, tj.float16])
def test_casts_are_astype(src, to):
    with np.errstate(invalid="ignore"):
        a = np.array([[1.7, -2.5, 0.0], [3.0, -0.0, 1e4]]).astype(src)
        for _ in range(3):
            got = tj.tensor(a).to(to)
            assert got.dtype is to
            np.testing.assert_array_equal(got.numpy(), a.astype(to.np))


def test_float_of_from_numpy_keeps_gradient_flow():
    x = tj.from_numpy(np.arange(3.0)).requires_grad_()
    for _ in range(2):
        y = x.float()
        assert y.dtype is tj.float32 and y.requires_grad
        (y * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 4.0))
    assert x.grad.dtype is tj.float64


@pytest.mark.parametrize("start,end", [(0, -1), (1, -1), (1, 2), (0, 0), (-2, -1)])
def test_flatten_matches_torch(start, end):
    torch = pytest.importorskip("torch")
    a = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    got = tj.tensor(a).flatten(start, end)
    want = torch.tensor(a).flatten(start, end)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("strided", [False, True])
def test_stack_and_cat_through_their_plans_match_torch(dim, strided):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4) if not strided else (4, 3)).astype(np.float32) for _ in range(3)]
    if strided:   # transposed views: numpy would lay the concatenation out column-major
        arrays = [a.T for a in arrays]
    ours = [tj.tensor(a) for a in arrays]
    theirs = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    for _ in range(3):
        got = tj.stack(ours, dim)
        want = torch.stack(theirs, dim)
        assert tuple(got.shape) == tuple(want.shape) and got.is_contiguous()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        if dim < 2:
            got = tj.cat(ours, dim)
            assert got.is_contiguous()
            np.testing.assert_array_equal(got.numpy(), torch.cat(theirs, dim).numpy())
