"""Composite normalization ops: batch_norm, group_norm, instance_norm (PyTorch's functionals).

All three normalize with the biased variance; batch_norm and instance_norm update
running statistics in place (mean, and the *unbiased* variance, as PyTorch does)
through ``copy_`` under ``no_grad``, which the tracer turns into a write-back of the
buffer, so the updates also happen inside a compiled module.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..autograd.grad_mode import no_grad
from ..errors import ArgumentError, DTypeError, ShapeError
from . import batchnorm_prim as _bn
from .elementwise import rsqrt
from .indexing import getitem
from .reductions import mean
from .shape import reshape

__all__ = ["batch_norm", "group_norm", "instance_norm", "check_dtypes"]


def _channel_view(t, ndim: int):
    """A per-channel (C,) tensor shaped to broadcast along dim 1 of an (N, C, ...) tensor."""
    return reshape(t, (1, -1) + (1,) * (ndim - 2))


def _affine(y, weight, bias):
    if weight is not None:
        y = y * _channel_view(weight, y.ndim)
    if bias is not None:
        y = y + _channel_view(bias, y.ndim)
    return y


def _check_channels(op: str, t, name: str, c: int) -> None:
    if t is not None and tuple(t.shape) != (c,):
        raise ShapeError(f"{op}: {name} of shape {tuple(t.shape)} should be ({c},) for an input with "
                         f"{c} channels")


def check_dtypes(op: str, input, **tensors) -> None:
    """PyTorch's dtype rule for batch normalization: a floating input, and weight, bias and
    running statistics of the input's dtype (float32 ones may serve a float16 or bfloat16
    input, as under autocast)."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {input.dtype.name}")
    for name, t in tensors.items():
        if t is None or t.dtype is input.dtype or (input.dtype in (_dt.float16, _dt.bfloat16)
                                                   and t.dtype is _dt.float32):
            continue
        raise DTypeError(f"{op}: input is {input.dtype.name} but {name} is {t.dtype.name}; they must "
                         f"share one dtype (convert the input, e.g. input.to({t.dtype.name}), or the "
                         f"module, e.g. .to({input.dtype.name}))")


def _stats(x, dims):
    mu = mean(x, dims, keepdim=True)
    d = x - mu
    return mu, d, mean(d * d, dims, keepdim=True)


def _update_running(running, new, momentum) -> None:
    """running = (1 - momentum) * running + momentum * new, in place and outside autograd."""
    with no_grad():
        running.copy_(running * (1.0 - momentum) + new.detach() * momentum)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum=0.1, eps: float = 1e-5):
    """Normalize over every dim but dim 1 (channels). ``momentum`` may be a float or a 0-d tensor."""
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got shape "
                         f"{tuple(input.shape)}")
    c = input.shape[1]
    for t, name in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                    (bias, "bias")):
        _check_channels("batch_norm", t, name, c)
    check_dtypes("batch_norm", input, weight=weight, bias=bias, running_mean=running_mean,
                 running_var=running_var)
    dims = (0,) + tuple(range(2, input.ndim))
    if training or running_mean is None:
        n = input.numel() // c
        if training and n <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got "
                             f"input of shape {tuple(input.shape)}")
        if weight is not None and bias is not None:
            # The affine case through primitives (ops/batchnorm_prim.py): one pass for the
            # statistics and the normalization, one for the gradient.
            y, stats = _bn.batch_norm_forward(input, weight, bias, eps)
            if training and running_mean is not None:
                _update_running(running_mean, getitem(stats, 0), momentum)
            if training and running_var is not None:
                _update_running(running_var, getitem(stats, 1) * (n / (n - 1)), momentum)
            return y
        mu, d, var = _stats(input, dims)
        if training and running_mean is not None:
            _update_running(running_mean, reshape(mu, (c,)), momentum)
        if training and running_var is not None:
            _update_running(running_var, reshape(var, (c,)) * (n / (n - 1)), momentum)
        # The weight joins the per-channel factor before touching the big tensor: one
        # full-size product forward and two fewer backward than (d * rstd) * weight.
        scale = rsqrt(var + eps)
        if weight is not None:
            scale = scale * _channel_view(weight, input.ndim)
        y = d * scale
        if bias is not None:
            y = y + _channel_view(bias, input.ndim)
        return y
    # Inference, as PyTorch computes it: y = x * alpha + beta with per-channel
    # alpha = weight / sqrt(running_var + eps) and beta = bias - running_mean * alpha.
    alpha = rsqrt(running_var + eps)
    if weight is not None:
        alpha = alpha * weight
    beta = -running_mean * alpha
    if bias is not None:
        beta = beta + bias
    return input * _channel_view(alpha, input.ndim) + _channel_view(beta, input.ndim)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalize each of ``num_groups`` channel groups of each sample."""
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected an input of at least 2 dims (N, C, ...), got shape "
                         f"{tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise ArgumentError(f"group_norm: the number of channels ({c}) of input shape {tuple(input.shape)} "
                         f"must be divisible by num_groups ({num_groups})")
    _check_channels("group_norm", weight, "weight", c)
    _check_channels("group_norm", bias, "bias", c)
    g = reshape(input, (n, num_groups, -1))
    _, d, var = _stats(g, (2,))
    y = reshape(d * rsqrt(var + eps), tuple(input.shape))
    return _affine(y, weight, bias)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalize each channel of each sample over its spatial dims.

    With running statistics and ``use_input_stats``, they are updated with the batch
    average of the per-instance mean and unbiased variance (as PyTorch does).
    """
    if input.ndim < 3:
        raise ShapeError(f"instance_norm: expected an input of at least 3 dims (N, C, ...), got shape "
                         f"{tuple(input.shape)}")
    c = input.shape[1]
    for t, name in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                    (bias, "bias")):
        _check_channels("instance_norm", t, name, c)
    dims = tuple(range(2, input.ndim))
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and running_var")
        y = (input - _channel_view(running_mean, input.ndim)) * \
            _channel_view(rsqrt(running_var + eps), input.ndim)
        return _affine(y, weight, bias)
    n = input.numel() // (input.shape[0] * c)
    if n <= 1:
        raise ValueError(f"instance_norm: expected more than 1 spatial element when training, got "
                         f"input of shape {tuple(input.shape)}")
    mu, d, var = _stats(input, dims)
    if running_mean is not None:
        _update_running(running_mean, mean(reshape(mu, (-1, c)), 0), momentum)
    if running_var is not None:
        _update_running(running_var, mean(reshape(var, (-1, c)), 0) * (n / (n - 1)), momentum)
    return _affine(d * rsqrt(var + eps), weight, bias)
