"""More composite activations and dropouts, with PyTorch's signatures.

Activations: glu, hardshrink, softshrink, tanhshrink, softsign, threshold, softmin, rrelu,
gumbel_softmax and the in-place spellings F exposes (``relu_``, ``elu_``, ...). Dropouts:
dropout1d / dropout3d (whole channels, like dropout2d), alpha_dropout and
feature_alpha_dropout (SELU's self-normalizing dropout: dropped units take the negative
saturation value and the result is scaled back to zero mean, unit variance).
"""
from __future__ import annotations

import math

from ..errors import ArgumentError, ShapeError, user_stacklevel
from .activation import apply_inplace, celu, elu, hardtanh, selu
from .composite import leaky_relu, masked_dropout, softmax
from .elementwise import abs as _abs, cast, log, tanh, where
from .random import rand, rand_like
from .shape import squeeze, unsqueeze
from .dtype_checks import takes
from .opmath import opmath
from . import shrink_prim

__all__ = ["glu", "hardshrink", "softshrink", "tanhshrink", "softsign", "threshold", "threshold_",
           "softmin", "rrelu", "rrelu_", "gumbel_softmax", "relu_", "elu_", "celu_", "selu_",
           "hardtanh_", "leaky_relu_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
           "feature_alpha_dropout"]


@takes("input")
@opmath
def glu(input, dim: int = -1):
    """First half of `input` along `dim` times the sigmoid of the second half."""
    n = input.shape[dim]
    if n % 2:
        raise ShapeError(f"glu: halving dimension {dim} of size {n} must be even")
    a, b = input.split(n // 2, dim)
    # (a half split off a later dim is strided: its sigmoid, a math call, runs as the
    # contiguous elementwise kernel on a copy, and so does its backward; numpy's exp alone
    # costs more than the copy)
    return a * b.contiguous().sigmoid()


@takes("input")
def hardshrink(input, lambd: float = 0.5):
    if input.dtype.is_floating_point:
        return shrink_prim.hardshrink(input, lambd)   # one pass each way (shrink_prim.py)
    return where(_abs(input) > lambd, input, 0.0)


@takes("input")
def softshrink(input, lambd: float = 0.5):
    if lambd < 0:
        raise ArgumentError(f"softshrink: lambda must be non-negative, got {lambd}")
    if input.dtype.is_floating_point:
        return shrink_prim.softshrink(input, lambd)
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, 0.0))


@opmath
def tanhshrink(input):
    return input - tanh(input)


@opmath
def softsign(input):
    return input / (_abs(input) + 1)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """`input` where it is above `threshold`, else `value`."""
    def fn(x):
        if x.dtype.is_floating_point:
            return shrink_prim.threshold(x, threshold, value)
        out = where(x > threshold, x, value)
        return cast(out, x.dtype) if out.dtype is not x.dtype else out
    return apply_inplace(input, fn, inplace)


_threshold = threshold


def threshold_(input, threshold: float, value: float):
    return _threshold(input, threshold, value, inplace=True)


def implicit_softmax_dim(name: str, ndim: int) -> int:
    """PyTorch's legacy dim for a softmax-like call without one (0 for 0-, 1- and 3-D inputs,
    else 1), with its deprecation warning."""
    import warnings
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. "
                  f"Change the call to include dim=X as an argument.", UserWarning, stacklevel=user_stacklevel())
    return 0 if ndim in (0, 1, 3) else 1


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = implicit_softmax_dim("softmin", input.ndim)
    x = -input if dtype is None else -cast(input, dtype)
    return softmax(x, dim)


@takes("input")
def rrelu(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False):
    """Leaky ReLU with a slope drawn from U(lower, upper) per element when training, their
    mean otherwise."""
    if training:
        slope = rand_like(input) * (upper - lower) + lower
        return apply_inplace(input, lambda x: where(x >= 0, x, x * slope), inplace)
    return apply_inplace(input, lambda x: leaky_relu(x, (lower + upper) / 2), inplace)


def rrelu_(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False):
    return rrelu(input, lower, upper, training, inplace=True)


def gumbel_softmax(logits, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1):
    """Softmax of (logits + Gumbel noise) / tau; ``hard`` gives the one-hot of its argmax in
    the forward pass with the soft sample's gradient (straight-through)."""
    u = rand_like(logits)
    gumbels = -log(-log(u + eps) + eps) if eps else -log(-log(u))
    y = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y
    from .composite import one_hot
    from .rearrange import movedim
    index = y.argmax(dim)
    hard_y = movedim(cast(one_hot(index, y.shape[dim]), y.dtype), -1, dim)
    return hard_y - y.detach() + y


def relu_(input):
    return input.relu_()


def elu_(input, alpha: float = 1.0):
    return elu(input, alpha, inplace=True)


def celu_(input, alpha: float = 1.0):
    return celu(input, alpha, inplace=True)


def selu_(input):
    return selu(input, inplace=True)


def hardtanh_(input, min_val: float = -1.0, max_val: float = 1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def leaky_relu_(input, negative_slope: float = 0.01):
    return apply_inplace(input, lambda x: leaky_relu(x, negative_slope))


def _check_p(op, p):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, got {p}")


def _channel_dropout(input, p, training, inplace, spatial: int, op: str):
    _check_p(op, p)
    if input.ndim not in (spatial + 1, spatial + 2):
        raise ShapeError(f"{op}: expected a {spatial + 1}-D or {spatial + 2}-D input, got shape "
                         f"{tuple(input.shape)}")
    shape = tuple(input.shape[:input.ndim - spatial]) + (1,) * spatial
    return masked_dropout(op, input, p, training, inplace, shape)


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, L) (or (C, L)) with probability p; scale the rest."""
    return _channel_dropout(input, p, training, inplace, 1, "dropout1d")


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, H, W) with probability p; scale the rest.

    As in PyTorch, every input is read as (N, C, *): a 3-D input is (N, C, L) (channel-wise
    1-D dropout, with PyTorch's warning), not one unbatched image; other ranks warn too."""
    _check_p("dropout2d", p)
    if input.ndim < 2:
        raise ShapeError(f"dropout2d: expected a 3-D or 4-D input, got shape {tuple(input.shape)}")
    if input.ndim != 4:
        import warnings
        if input.ndim != 3:
            warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated "
                          f"and will result in an error in a future release. To retain the behavior and "
                          f"silence this warning, please use dropout instead.", UserWarning,
                          stacklevel=user_stacklevel())
        else:
            warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
                          "dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
                          "is the channel dim. To maintain the 1D channel-wise dropout behavior, please "
                          "call dropout1d instead.", UserWarning, stacklevel=user_stacklevel())
    return _channel_dropout(input, p, training, inplace, input.ndim - 2, "dropout2d")


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, D, H, W) (or (C, D, H, W)) with probability p; other
    ranks with PyTorch's deprecated reading and warning (one sample, channels along dim 0)."""
    if input.ndim not in (4, 5):
        import warnings
        if input.ndim < 2:
            raise ShapeError(f"dropout3d: expected a 4-D or 5-D input, got shape {tuple(input.shape)}")
        warnings.warn(f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated "
                      f"and will result in an error in a future release.", UserWarning, stacklevel=user_stacklevel())
        out = _channel_dropout(unsqueeze(input, 0), p, training, False, input.ndim - 1, "dropout3d")
        out = out if out is not None else input
        out = squeeze(out, 0) if out.ndim > input.ndim else out
        return input.copy_(out) if inplace and out is not input else out
    return _channel_dropout(input, p, training, inplace, 3, "dropout3d")


_ALPHA_PRIME = -1.7580993408473766   # -scale * alpha of SELU: the value a dropped unit takes


def _alpha(input, p, training, inplace, mask_shape, op):
    _check_p(op, p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return apply_inplace(input, lambda x: x * 0.0, inplace)
    keep = cast(rand(*mask_shape, dtype=input.dtype, device=input.device) >= p, input.dtype)
    a = 1.0 / math.sqrt((_ALPHA_PRIME ** 2 * p + 1) * (1 - p))
    b = -a * _ALPHA_PRIME * p
    return apply_inplace(input, lambda x: (x * keep + _ALPHA_PRIME * (1 - keep)) * a + b, inplace)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False):
    return _alpha(input, p, training, inplace, tuple(input.shape), "alpha_dropout")


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False):
    if input.ndim < 2:
        raise ShapeError(f"feature_alpha_dropout: expected at least a 2-D input, got shape "
                         f"{tuple(input.shape)}")
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    return _alpha(input, p, training, inplace, shape, "feature_alpha_dropout")

