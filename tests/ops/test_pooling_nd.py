"""Window arguments of the n-d pools (ops/pooling_nd.py) and F.unfold: a kernel, stride or
dilation below 1 or a negative padding is refused, as PyTorch refuses it (max_pool1d with
dilation 0 returned values, and a stride of 0 divided by zero); max pools send the
gradient to the index taken, ties included."""
import numpy as np
import pytest

import tracejit as tj

CALLS = [("max_pool1d", (3, 5), dict(kernel_size=2, dilation=0)),
         ("max_pool3d", (1, 1, 3, 3, 3), dict(kernel_size=1, dilation=0)),
         ("avg_pool1d", (3, 5), dict(kernel_size=2, stride=0)),
         ("lp_pool2d", (1, 1, 5, 5), dict(norm_type=2, kernel_size=2, stride=0)),
         ("max_pool2d", (1, 1, 5, 5), dict(kernel_size=2, dilation=-1, ceil_mode=True, return_indices=True)),
         ("unfold", (1, 1, 5, 5), dict(kernel_size=2, dilation=-1)),
         ("unfold", (1, 1, 5, 5), dict(kernel_size=2, stride=0)),
         ("unfold", (1, 1, 5, 5), dict(kernel_size=2, padding=-1))]


@pytest.mark.parametrize("name,shape,kw", CALLS)
def test_bad_window_arguments_are_refused_like_pytorch(name, shape, kw):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, name)(torch.ones(shape), **kw)
    bad = next(k for k in ("dilation", "stride", "padding") if k in kw)
    with pytest.raises(ValueError, match=f"{name}: {bad} must be"):
        getattr(tj.nn.functional, name)(tj.ones(shape), **kw)


@pytest.mark.parametrize("name, args, shape", [("max_pool1d", (3,), (1, 2, 6)),
                                               ("max_pool3d", (2,), (1, 1, 2, 4, 4)),
                                               ("adaptive_max_pool1d", (2,), (1, 2, 6)),
                                               ("adaptive_max_pool3d", (1,), (1, 1, 2, 4, 4))])
def test_max_pools_give_the_gradient_to_the_index_taken(name, args, shape):
    # ties (a window of equal values) send the gradient to one element, as PyTorch's; the
    # output may be written in place before backward
    torch = pytest.importorskip("torch")
    a = np.round(np.random.default_rng(2).uniform(0, 2, shape))   # many ties
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        y = getattr(m.nn.functional, name)(x * 1.0, *args)
        y.mul_(2.0)
        (y * m.arange(y.numel(), dtype=m.float64).reshape(y.shape)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
