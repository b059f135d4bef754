"""Fractional max pooling against PyTorch given the same random samples: values, indices
and input gradients, 2-D and 3-D, batched and not, modules, compiled, bad arguments."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

RNG = np.random.default_rng(5)
CASES = [(2, (2, 3, 9, 11), 2, (4, 5)), (2, (2, 3, 9, 11), (3, 2), (6, 7)), (2, (3, 10, 10), 3, (5, 4)),
         (2, (1, 2, 7, 7), 2, (6, 6)), (2, (1, 1, 5, 5), 2, (1, 1)),
         (3, (2, 2, 7, 8, 9), 2, (4, 5, 6)), (3, (2, 6, 7, 9), (2, 3, 2), (3, 4, 5)),
         (3, (2, 3, 5, 6, 7), 2, 1), (3, (3, 4, 5, 4), 2, (1, 2, 1)), (2, (2, 3, 5, 6), 3, (1, 3))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, shape, k, out", CASES)
def test_values_indices_and_gradients_match_pytorch(n, shape, k, out, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    x[..., 0, 1] = x[..., 0, 0]   # ties: the first maximum in window order wins
    planes = (1 if len(shape) == n + 1 else shape[0], shape[-n - 1], n)
    s = RNG.random(planes).astype(dtype)
    name = f"fractional_max_pool{n}d"
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ot, it = getattr(torch.nn.functional, name)(xt, k, out, return_indices=True,
                                                 _random_samples=torch.tensor(s))
    oj, ij = getattr(tj.nn.functional, name)(xj, k, out, return_indices=True, _random_samples=tj.tensor(s))
    np.testing.assert_array_equal(oj.detach().numpy(), ot.detach().numpy())
    np.testing.assert_array_equal(ij.numpy(), it.numpy())
    g = RNG.standard_normal(tuple(ot.shape)).astype(dtype)
    ot.backward(torch.tensor(g))
    oj.backward(tj.tensor(g))
    np.testing.assert_array_equal(xj.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("batch, out", [(0, 2), (2, 0)])
def test_empty_batch_or_output_matches_pytorch(n, batch, out):
    name = f"fractional_max_pool{n}d"
    shape, outs = (batch, 3) + (5,) * n, (out,) + (2,) * (n - 1)
    ot = getattr(torch.nn.functional, name)(torch.zeros(shape), 2, outs)
    xj = tj.zeros(shape, requires_grad=True)
    oj, ij = getattr(tj.nn.functional, name)(xj, 2, outs, return_indices=True)
    assert tuple(oj.shape) == tuple(ij.shape) == tuple(ot.shape) == (batch, 3) + outs
    oj.sum().backward()
    np.testing.assert_array_equal(xj.grad.numpy(), np.zeros(shape))


def test_module_with_ratio_and_samples_matches_pytorch_and_compiles():
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    s = RNG.random((2, 3, 2)).astype(np.float32)
    mt = torch.nn.FractionalMaxPool2d(3, output_ratio=(0.5, 0.6), _random_samples=torch.tensor(s))
    mj = tj.nn.FractionalMaxPool2d(3, output_ratio=(0.5, 0.6), _random_samples=tj.tensor(s))
    ref = mt(torch.tensor(x)).numpy()
    assert list(mj.state_dict()) == list(mt.state_dict()) == ["_random_samples"]
    np.testing.assert_array_equal(mj(tj.tensor(x)).numpy(), ref)
    np.testing.assert_array_equal(tj.compile(mj)(tj.tensor(x)).numpy(), ref)
    drawn = tj.nn.FractionalMaxPool3d(2, output_size=(2, 3, 4))(tj.tensor(RNG.random((3, 5, 6, 7))))
    assert tuple(drawn.shape) == (3, 2, 3, 4)


def test_bad_arguments_are_named():
    x = tj.tensor(RNG.standard_normal((2, 3, 10, 12)))
    F = tj.nn.functional
    with pytest.raises(RuntimeError, match="pool height 2 too large relative to input height 10"):
        F.fractional_max_pool2d(x, 2, output_size=(10, 4))
    with pytest.raises(RuntimeError, match="kernel_size must be positive and output_size non-negative"):
        F.fractional_max_pool2d(x, 2, output_size=(-1, 4))
    with pytest.raises(ValueError, match="either an output_size or an output_ratio"):
        F.fractional_max_pool2d(x, 2)
    with pytest.raises(ValueError, match="_random_samples should have shape"):
        F.fractional_max_pool2d(x, 2, (4, 5), _random_samples=tj.rand(2, 3, 3))
    with pytest.raises(ValueError, match="output_ratio must be between 0 and 1"):
        tj.nn.FractionalMaxPool2d(2, output_ratio=(0.5, 1.2))
    with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
        tj.nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5)


@pytest.mark.parametrize("n, shape, k, out", [CASES[0], CASES[1], CASES[5]])
def test_nan_windows_take_pytorchs_last_nan(n, shape, k, out):
    """A window holding NaNs gives PyTorch's index (its last NaN) and gradient."""
    r = np.random.default_rng(11)
    x = np.round(r.standard_normal(shape) * 2)
    x[r.random(shape) < (0.25 if n == 2 else 0.08)] = np.nan
    s = r.random((shape[0], shape[1], n))
    name = f"fractional_max_pool{n}d"
    got = []
    for m in (tj, torch):
        xv = m.tensor(x, requires_grad=True)
        o, i = getattr(m.nn.functional, name)(xv, k, out, return_indices=True,
                                              _random_samples=m.tensor(s))
        o.backward(m.tensor(np.arange(1.0, o.numel() + 1).reshape(tuple(o.shape))))
        got.append((o.detach().numpy(), i.numpy(), xv.grad.numpy()))
    assert np.isnan(got[1][0]).any() and not np.isnan(got[1][0]).all()
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
