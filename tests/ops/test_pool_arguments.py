"""Window and size arguments of the 2-D pools, unfold/fold, adaptive pools, interpolate and
pixel_shuffle: a tuple of the wrong length or a non-positive factor is refused naming the
argument, as PyTorch refuses it; a 1-tuple is a pair, as in PyTorch's pools."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

X = np.random.default_rng(3).standard_normal((2, 4, 6, 5)).astype(np.float32)
BAD = [("max_pool2d", X, dict(kernel_size=(2, 2, 2)), "kernel_size"),
       ("avg_pool2d", X, dict(kernel_size=2, stride=(1, 1, 1)), "stride"),
       ("max_pool2d", X, dict(kernel_size=2, ceil_mode=True, dilation=(1, 1, 1)), "dilation"),
       ("unfold", X, dict(kernel_size=(2, 2, 2)), "kernel_size"),
       ("fold", X.reshape(2, 12, 10), dict(output_size=(3, 3, 1), kernel_size=2), "output_size"),
       ("adaptive_max_pool2d", X, dict(output_size=(2, 2, 2)), "output_size"),
       ("adaptive_avg_pool2d", X, dict(output_size=(2, 2, 2)), "output_size"),
       ("adaptive_max_pool3d", X[None], dict(output_size=-1), "output_size"),
       ("interpolate", X[0], dict(size=(3, 5), mode="linear"), "size"),
       ("pixel_shuffle", X, dict(upscale_factor=0), "upscale_factor"),
       ("pixel_unshuffle", X, dict(downscale_factor=-1), "downscale_factor")]


@pytest.mark.parametrize("name, x, kw, culprit", BAD)
def test_bad_arguments_are_refused_by_name_like_pytorch(name, x, kw, culprit):
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        getattr(torch.nn.functional, name)(torch.tensor(x), **kw)
    with pytest.raises(ValueError, match=f"{name}: {culprit} "):
        getattr(tj.nn.functional, name)(tj.tensor(x), **kw)


@pytest.mark.parametrize("name, kw", [("max_pool2d", dict(kernel_size=(2,))), ("avg_pool2d", dict(kernel_size=(3,))),
                                      ("max_pool2d", dict(kernel_size=3, stride=(2,), padding=(1,)))])
def test_one_tuple_windows_are_pairs_as_in_pytorch(name, kw):
    ot = getattr(torch.nn.functional, name)(torch.tensor(X), **kw)
    oj = getattr(tj.nn.functional, name)(tj.tensor(X), **kw)
    np.testing.assert_allclose(oj.numpy(), ot.numpy(), rtol=1e-6)
