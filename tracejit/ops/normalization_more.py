"""Normalizations beyond normalization.py, as composites with PyTorch's signatures:
rms_norm, local_response_norm, normalize (L^p normalization along a dim)."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from .elementwise import rsqrt
from .reductions import mean
from .shape import reshape
from .spatial import pad
from .opmath import as_input, in_opmath
from . import autocast as _autocast
from .. import dtypes as _dt
from .elementwise import cast

__all__ = ["rms_norm", "local_response_norm", "normalize"]


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) over the trailing `normalized_shape` dims, times weight.

    As PyTorch's: normalized in float32 for a float16 or bfloat16 input (else in its
    dtype), then multiplied by a weight of any floating dtype as they promote, the result
    in the input's dtype; eps defaults to the machine epsilon of the computing dtype."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise ShapeError(f"rms_norm: normalized_shape {shape} is empty or does not match the trailing dims of "
                         f"input {tuple(input.shape)}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"rms_norm: expected a floating point input, got {input.dtype.name}")
    x = in_opmath(input)
    if eps is None:
        import numpy as np
        eps = float(np.finfo(x.dtype.np).eps)
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    out = x * rsqrt(mean(x * x, dims, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return as_input(out, input)


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """x / (k + alpha / size * sum of x^2 over `size` neighbouring channels)^beta."""
    if input.ndim < 3:
        raise ShapeError(f"local_response_norm: expected 3-D or more input, got shape "
                         f"{tuple(input.shape)}")
    if input.numel() == 0:
        return input
    c = input.shape[1]
    sq = reshape(input * input, (input.shape[0], c, -1))
    div = reshape(_channel_window_mean(sq, size), tuple(input.shape))
    return input / (div * alpha + k) ** beta


def _channel_window_mean(sq, size: int):
    """The mean of (N, C, L) `sq` over `size` neighbouring channels, zero-padded, as
    `size` shifted slices added in order: a window pooling over one dim took a general
    pooling's scatter back."""
    if _autocast.current() is not None and sq.dtype in (_dt.bfloat16, _dt.float16):
        sq = cast(sq, _dt.float32)   # (PyTorch's is an average pooling: float32 under autocast)
    c = sq.shape[1]
    padded = pad(sq, (0, 0, size // 2, (size - 1) // 2))
    total = padded[:, 0:c]
    for j in range(1, size):
        total = total + padded[:, j:j + c]
    return total / size


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """input / max(||input||_p along dim, eps)."""
    from .elementwise import clamp
    from .reductions import norm as _norm
    norm = _norm(input, p, dim, keepdim=True)
    return input / clamp(norm, min=eps).expand_as(input)
