"""Window arguments of the n-d pools (ops/pooling_nd.py) and F.unfold: a kernel, stride or
dilation below 1 or a negative padding is refused, as PyTorch refuses it (max_pool1d with
dilation 0 returned values, and a stride of 0 divided by zero)."""
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
