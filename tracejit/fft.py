"""``tracejit.fft``: the real-valued helpers of ``torch.fft`` (sample frequencies and the
zero-frequency shifts). The transforms themselves return complex tensors, which tracejit
does not have; calling one raises an error that says so."""
from __future__ import annotations

import numpy as np

from .ops.creation import tensor
from .ops.rearrange import roll

__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift", "fft", "ifft", "rfft", "irfft", "fft2",
           "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfft", "ihfft"]


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False):
    t = tensor(np.fft.fftfreq(n, d).astype(np.float32 if dtype is None else dtype.np), device=device)
    return t.requires_grad_() if requires_grad else t


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False):
    t = tensor(np.fft.rfftfreq(n, d).astype(np.float32 if dtype is None else dtype.np), device=device)
    return t.requires_grad_() if requires_grad else t


def _dims(x, dim):
    if dim is None:
        return tuple(range(x.ndim))
    return (dim,) if isinstance(dim, int) else tuple(dim)


def fftshift(input, dim=None):
    dims = _dims(input, dim)
    return roll(input, tuple(input.shape[d] // 2 for d in dims), dims)


def ifftshift(input, dim=None):
    dims = _dims(input, dim)
    return roll(input, tuple(-(input.shape[d] // 2) for d in dims), dims)


def _complex(name):
    def transform(*args, **kwargs):
        raise NotImplementedError(f"fft.{name}: transforms return complex tensors, and tracejit has no "
                                  f"complex dtypes")
    transform.__name__ = name
    return transform


for _n in ("fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn",
           "irfftn", "hfft", "ihfft"):
    globals()[_n] = _complex(_n)
del _n
