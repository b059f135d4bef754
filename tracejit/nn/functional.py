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
                   logsigmoid, max_pool2d, mse_loss, nll_loss, one_hot, sigmoid, softplus, tanh)
from ..ops.activation import apply_inplace
from ..ops.activation_more import implicit_softmax_dim
from ..ops.conv import _pair, fold_size as _fold_size
from ..errors import ArgumentError, ShapeError
from ..shapes import _assume_equal
from ..ops.spatial import (adaptive_avg_pool2d, adaptive_max_pool2d, conv1d,  # noqa: F401
                           conv_transpose2d, interpolate, pad)
from ..ops.attention import multi_head_attention_forward, scaled_dot_product_attention  # noqa: F401
from ..ops.sampling import affine_grid, grid_sample  # noqa: F401
from ..ops.linalg import grouped_mm  # noqa: F401

__all__ = ["relu", "gelu", "softmax", "log_softmax", "layer_norm", "dropout", "embedding", "one_hot",
           "conv2d", "max_pool2d", "avg_pool2d", "linear", "mse_loss", "l1_loss", "cross_entropy",
           "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "sigmoid", "tanh",
           "silu", "softplus", "leaky_relu", "logsigmoid", "pad", "unfold", "fold",
           "conv1d", "conv_transpose2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "interpolate",
           "dropout2d", "scaled_dot_product_attention", "multi_head_attention_forward",
           "affine_grid", "grid_sample", "grouped_mm"]
from ..ops.normalization import batch_norm, group_norm, instance_norm  # noqa: E402,F401
__all__ += ["batch_norm", "group_norm", "instance_norm"]
from ..ops.activation import *  # noqa: E402,F401,F403
from ..ops.activation import __all__ as _act_all  # noqa: E402
from ..ops.losses import *  # noqa: E402,F401,F403
from ..ops.losses import __all__ as _loss_all  # noqa: E402
__all__ += _act_all + _loss_all


def softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``ops.softmax``; without dim, PyTorch's legacy choice with its warning (not dim -1)."""
    if dim is None:
        dim = implicit_softmax_dim("softmax", input.ndim)
    return _ops.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = implicit_softmax_dim("log_softmax", input.ndim)
    return _ops.log_softmax(input, dim, dtype=dtype)


def relu(input, inplace: bool = False):
    return input.relu_() if inplace else _ops.relu(input)


def silu(input, inplace: bool = False):
    return apply_inplace(input, _ops.silu, inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    return apply_inplace(input, lambda x: _ops.leaky_relu(x, negative_slope), inplace)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """PyTorch's argument order for ``tracejit.ops.unfold`` (im2col); a 3-D input (C, H, W)
    is one unbatched image, as in PyTorch."""
    for what, v, least in (("kernel_size", kernel_size, 1), ("dilation", dilation, 1), ("padding", padding, 0),
                           ("stride", stride, 1)):
        if min((v, v) if isinstance(v, int) else tuple(v)) < least:
            raise ArgumentError(f"unfold: {what} must be {'positive' if least else 'non-negative'}, got {v}")
    if input.ndim == 3:
        return _ops.unfold(input.unsqueeze(0), kernel_size, stride, padding, dilation).squeeze(0)
    return _ops.unfold(input, kernel_size, stride, padding, dilation)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """PyTorch's argument order for ``tracejit.ops.fold`` (col2im); a 2-D input (C*k*k, L)
    is one unbatched image, as in PyTorch."""
    output_size = _fold_size(output_size)
    _check_fold(input, output_size, kernel_size, dilation, padding, stride)
    if input.ndim == 2:
        return _ops.fold(input.unsqueeze(0), output_size, kernel_size, stride, padding, dilation).squeeze(0)
    return _ops.fold(input, output_size, kernel_size, stride, padding, dilation)


def _check_fold(input, output_size, kernel_size, dilation, padding, stride):
    """PyTorch's checks of fold's column count and block count, named by argument."""
    two = [_pair(v, what, "fold") for v, what in ((output_size, "output_size"), (kernel_size, "kernel_size"),
                                                (dilation, "dilation"), (padding, "padding"), (stride, "stride"))]
    (oh, ow), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = two
    blocks = [(size + 2 * p - d * (k - 1) - 1) // s + 1
              for size, k, d, p, s in ((oh, kh, dh, ph, sh), (ow, kw, dw, pw, sw))]
    if input.ndim not in (2, 3):
        raise ShapeError(f"fold: expected a 2-D or 3-D input, got shape {tuple(input.shape)}")
    c, n = input.shape[-2], input.shape[-1]
    if c % (kh * kw):
        raise ShapeError(f"fold: the input's dimension {input.ndim - 2} ({c}) must be divisible by "
                         f"the product of kernel_size {(kh, kw)} ({kh * kw})")
    # (a block count from a changing int argument and one from a symbolic dim may differ in
    # form and agree in this call: taken as equal, guarded both ways, as a broadcast's dims)
    if not (n == blocks[0] * blocks[1] or _assume_equal(n, blocks[0] * blocks[1])):
        raise ShapeError(f"fold: given output_size={(oh, ow)}, kernel_size={(kh, kw)}, dilation={(dh, dw)}, "
                         f"padding={(ph, pw)}, stride={(sh, sw)}, the input's last dimension must be "
                         f"{blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]} blocks, got {n}")


from ..ops.activation_more import *  # noqa: E402,F401,F403
from ..ops.activation_more import __all__ as _act_more  # noqa: E402
from ..ops.conv_nd import conv3d, conv_tbc, conv_transpose1d, conv_transpose3d  # noqa: E402,F401
from ..ops.embedding_bag import embedding_bag  # noqa: E402,F401
from ..ops.losses_more import *  # noqa: E402,F401,F403
from ..ops.losses_more import __all__ as _loss_more  # noqa: E402
from ..ops.normalization_more import local_response_norm, normalize, rms_norm  # noqa: E402,F401
from ..ops.pooling_nd import *  # noqa: E402,F401,F403
from ..ops.pooling_nd import __all__ as _pool_nd  # noqa: E402
from ..ops.pool_fractional import *  # noqa: E402,F401,F403
from ..ops.pool_fractional import __all__ as _pool_frac  # noqa: E402
from ..ops.products import bilinear, pdist  # noqa: E402,F401
from ..ops.rearrange import channel_shuffle, native_channel_shuffle, pixel_shuffle, pixel_unshuffle  # noqa: E402,F401
__all__ += (_act_more + _loss_more + _pool_nd + _pool_frac
            + ["conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose3d", "embedding_bag",
               "local_response_norm", "normalize", "rms_norm", "bilinear", "pdist", "channel_shuffle",
               "native_channel_shuffle", "pixel_shuffle", "pixel_unshuffle", "upsample",
               "upsample_nearest", "upsample_bilinear"])


def upsample(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """The deprecated name of ``interpolate``."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Bilinear resize with ``align_corners=True`` (what this deprecated name always did)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
