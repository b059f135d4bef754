"""``tracejit.nn.functional`` (``import tracejit.nn.functional as F``).

Every function here is the op of the same name in ``tracejit.ops``, re-exported,
so modules, user code, the tracer and the compiler all share one definition. The
few wrappers below only adapt PyTorch's calling conventions (``inplace=``, the
argument order of ``unfold``) or build `pad` from existing primitives.
"""
from __future__ import annotations

from .. import ops as _ops
from ..ops import (avg_pool2d, binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: F401
                   conv2d, cross_entropy, dropout, embedding, gelu, l1_loss, layer_norm, linear,
                   log_softmax, logsigmoid, max_pool2d, mse_loss, nll_loss, one_hot, sigmoid, silu,
                   softmax, softplus, tanh)

__all__ = ["relu", "gelu", "softmax", "log_softmax", "layer_norm", "dropout", "embedding", "one_hot",
           "conv2d", "max_pool2d", "avg_pool2d", "linear", "mse_loss", "l1_loss", "cross_entropy",
           "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "sigmoid", "tanh",
           "silu", "softplus", "leaky_relu", "logsigmoid", "pad", "unfold", "fold"]
from ..ops.normalization import batch_norm, group_norm, instance_norm  # noqa: E402,F401
__all__ += ["batch_norm", "group_norm", "instance_norm"]
from ..ops.activation import *  # noqa: E402,F401,F403
from ..ops.activation import __all__ as _act_all  # noqa: E402
from ..ops.losses import *  # noqa: E402,F401,F403
from ..ops.losses import __all__ as _loss_all  # noqa: E402
__all__ += _act_all + _loss_all


def relu(input, inplace: bool = False):
    return input.relu_() if inplace else _ops.relu(input)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    out = _ops.leaky_relu(input, negative_slope)
    return input.copy_(out) if inplace else out


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """PyTorch's argument order for ``tracejit.ops.unfold`` (im2col)."""
    return _ops.unfold(input, kernel_size, stride, padding, dilation)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """PyTorch's argument order for ``tracejit.ops.fold`` (col2im)."""
    return _ops.fold(input, output_size, kernel_size, stride, padding, dilation)


def pad(input, pad, mode: str = "constant", value: float = 0.0):
    """Constant padding: ``pad`` lists (before, after) pairs starting from the last dim."""
    if mode != "constant":
        raise NotImplementedError(f"pad: only mode='constant' is supported, got {mode!r}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: padding length must be even and at most 2 * input.ndim "
                         f"({2 * input.ndim}), got {len(pad)}")
    out = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0 or after < 0:
            raise NotImplementedError(f"pad: negative padding (cropping) is not supported, got {pad}")
        parts = []
        for n in (before, None, after):
            if n is None:
                parts.append(out)
            elif n > 0:
                shape = list(out.shape)
                shape[dim] = n
                parts.append(_ops.full(tuple(shape), value, dtype=out.dtype, device=out.device))
        if len(parts) > 1:
            out = _ops.cat(parts, dim)
    return out
