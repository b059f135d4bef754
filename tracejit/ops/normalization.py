"""Composite normalization ops: batch_norm, group_norm, instance_norm (PyTorch's functionals).

All three normalize with the biased variance; batch_norm and instance_norm update
running statistics in place (mean, and the *unbiased* variance, as PyTorch does)
through ``copy_`` under ``no_grad``, which the tracer turns into a write-back of the
buffer, so the updates also happen inside a compiled module.

Dtypes as PyTorch's CPU kernels: the parameters share the input's dtype, or are float32
for a float16 or bfloat16 input (`check_dtypes`); the result has the input's dtype, and a
half-precision input is normalized in float32 and rounded once (`in_opmath`).
"""
from __future__ import annotations

import math

import numpy as _np

from .. import dtypes as _dt
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ..autograd.node import make_prim_node
from ..device import CPU
from ..tensor import Tensor
from ..errors import ArgumentError, DTypeError, ShapeError
from . import batchnorm_prim as _bn
from .channel_affine_prim import channel_affine
from .creation import ones, zeros
from .elementwise import cast, rsqrt
from .indexing import getitem
from . import eager as _eager
from .eager import bind
from .reductions import mean
from .registry import Aval, defprim
from .shape import reshape
from .opmath import HALF as _HALF, as_input, in_opmath

__all__ = ["batch_norm", "group_norm", "instance_norm", "check_dtypes"]

_ROUNDED = (_dt.float32, _dt.float64)    # running statistics updated as PyTorch rounds them


def _channel_view(t, ndim: int):
    """A per-channel (C,) tensor shaped to broadcast along dim 1 of an (N, C, ...) tensor."""
    return reshape(t, (1, -1) + (1,) * (ndim - 2))


def _affine(y, weight, bias):
    # one primitive each way (ops/channel_affine_prim.py), the parameters in y's dtype (a
    # float16 module's weight beside the float32 its input is normalized in)
    wb = [t if t is None or t.dtype is y.dtype else cast(t, y.dtype) for t in (weight, bias)]
    return channel_affine(y, *wb)


def _check_args(op: str, input, least: int, **tensors) -> int:
    """The input's channel count, once it has at least `least` dims (N, C, ...) and each of
    `tensors` (weight, bias, running statistics) is None or one value a channel, of the
    dtypes `check_dtypes` allows."""
    if input.ndim < least:
        raise ShapeError(f"{op}: expected an input of at least {least} dims (N, C, ...), got shape "
                         f"{tuple(input.shape)}")
    c = input.shape[1]
    for name, t in tensors.items():
        if t is not None and tuple(t.shape) != (c,):
            raise ShapeError(f"{op}: {name} of shape {tuple(t.shape)} should be ({c},) for an input with "
                             f"{c} channels")
    check_dtypes(op, input, **tensors)
    return c


def check_dtypes(op: str, input, **tensors) -> None:
    """PyTorch's dtype rule for batch, layer, group and instance normalization: a floating
    input, and weight, bias and running statistics all of the input's dtype, or all
    float32 for a float16 or bfloat16 input (as under autocast)."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {input.dtype.name}")
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if first is None:
            first = (name, t.dtype)
            if t.dtype is input.dtype or (input.dtype in _HALF and t.dtype is _dt.float32):
                continue
            raise DTypeError(f"{op}: input is {input.dtype.name} but {name} is {t.dtype.name}; they must "
                             f"share one dtype (convert the input, e.g. input.to({t.dtype.name}), or the "
                             f"module, e.g. .to({input.dtype.name}))")
        if t.dtype is not first[1]:
            raise DTypeError(f"{op}: {first[0]} is {first[1].name} but {name} is {t.dtype.name}; the "
                             f"parameters and running statistics must share one dtype")


def _stats(x, dims):
    mu = mean(x, dims, keepdim=True)
    d = x - mu
    return mu, d, mean(d * d, dims, keepdim=True)


def _update_running(running, new, momentum, wide: bool = False) -> None:
    """running = momentum * new + (1 - momentum) * running, in place and outside autograd,
    rounded as PyTorch's CPU kernel (`RUNNING_UPDATE` for float32 and float64 statistics)."""
    with no_grad():
        new = new.detach()
        if not isinstance(momentum, (int, float)):
            running.copy_(running * (1.0 - momentum) + new * momentum)
            return
        if new.dtype is not running.dtype:
            new = cast(new, running.dtype)
        m = _factor(running, momentum)
        if running.dtype in _ROUNDED:
            running.copy_(bind(RUNNING_UPDATE, running, new, momentum=m, wide=bool(wide)))
        else:
            running.copy_(running * (1.0 - m) + new * m)


def _factor(running, momentum) -> float:
    """The momentum as the update multiplies by it: rounded to float32 unless the
    statistics are float64 (PyTorch's kernel holds it in their accumulate type)."""
    m = float(momentum)
    return m if running.dtype is _dt.float64 else float(_np.float32(m))


def _running_update_impl(xp, running, new, *, momentum, wide):
    # momentum and 1 - momentum in the statistics' dtype, each product rounded there, the
    # sum too; `wide` (float32 variance of a float32 input, which PyTorch adds in double)
    # keeps the momentum product exact and rounds the sum once
    kept = running * float(_np.asarray(1.0 - momentum, running.dtype))
    if wide:
        return (new.astype(_np.float64) * momentum + kept.astype(_np.float64)).astype(running.dtype)
    return (new * momentum + kept).astype(running.dtype, copy=False)


# One record for the blend (a batch norm's two updates were eleven eager ops: 45 us a call)
RUNNING_UPDATE = defprim("running_update", _running_update_impl,
                         lambda running, new, **kw: Aval(running.shape, running.dtype, running.device),
                         None, kind="other")


def _unbiased(var, n: int):
    """The unbiased variance from the biased one of `n` values, as PyTorch's kernel forms
    it: the sum of squares (``var * n``, exact where `var` is) divided by n - 1."""
    if isinstance(n, int):
        return var * float(n) / float(n - 1)
    return var * n / (n - 1)    # (a symbolic count stays symbolic: no guard on the batch size)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum=0.1, eps: float = 1e-5):
    """Normalize over every dim but dim 1 (channels). ``momentum`` may be a float or a 0-d tensor."""
    c = _check_args("batch_norm", input, 2, weight=weight, bias=bias, running_mean=running_mean,
                    running_var=running_var)
    dims = (0,) + tuple(range(2, input.ndim))
    wide = input.dtype is _dt.float32    # (PyTorch sums float32's running variance in double)
    if not input.numel() and (training or running_mean is None):
        # an empty batch: an empty result, the running statistics untouched (PyTorch's)
        training, running_mean, running_var = False, zeros(c, dtype=input.dtype), ones(c, dtype=input.dtype)
    if training or running_mean is None:
        n = input.numel() // c
        if training and n == 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got "
                             f"input of shape {tuple(input.shape)}")
        if weight is not None and bias is not None:
            # The affine case through primitives (ops/batchnorm_prim.py): one pass for the
            # statistics and the normalization, one for the gradient.
            if training:
                y = _train_in_one(input, running_mean, running_var, weight, bias, momentum, eps, n, wide)
                if y is not None:
                    return y
            y, stats = _bn.batch_norm_forward(input, weight, bias, eps)
            if training and running_mean is not None:
                _update_running(running_mean, getitem(stats, 0), momentum)
            if training and running_var is not None:
                _update_running(running_var, _unbiased(getitem(stats, 1), n), momentum, wide)
            return y
        x = in_opmath(input)
        mu, d, var = _stats(x, dims)
        if training and running_mean is not None:
            _update_running(running_mean, reshape(mu, (c,)), momentum)
        if training and running_var is not None:
            _update_running(running_var, _unbiased(reshape(var, (c,)), n), momentum, wide)
        # The weight joins the per-channel factor before touching the big tensor: one
        # full-size product forward and two fewer backward than (d * rstd) * weight.
        scale = rsqrt(var + eps)
        if weight is not None:
            scale = scale * _channel_view(weight, input.ndim)
        y = d * scale
        if bias is not None:
            y = y + _channel_view(bias, input.ndim)
        return as_input(y, input)
    return _inference(input, running_mean, running_var, weight, bias, eps)


def _inference(input, running_mean, running_var, weight, bias, eps):
    """Normalization by running statistics, as PyTorch computes it: y = x * alpha + beta
    with per-channel alpha = weight / sqrt(running_var + eps), beta = bias - running_mean *
    alpha (one channel_affine)."""
    alpha = rsqrt(running_var + eps)
    if weight is not None:
        alpha = alpha * weight
    beta = -running_mean * alpha
    if bias is not None:
        beta = beta + bias
    return as_input(_affine(in_opmath(input), alpha, beta), input)


def _train_in_one(input, running_mean, running_var, weight, bias, momentum, eps, n: int, wide: bool):
    """Eager training-mode batch norm of CPU float32/float64 tensors as one record: the
    forward record's array run directly, the running statistics blended into their
    memory by `RUNNING_UPDATE`'s form, and ``batch_norm_values``'s autograd node, the
    values and node the general path's dozen eager ops make (~6x faster for
    BatchNorm1d(64) on (128, 64)). None, having changed nothing, for anything else (a
    tracer or profiler, another device or dtype, a tensor momentum, statistics that are
    views or read-only)."""
    if _eager._tracers_active or type(momentum) not in (int, float):
        return None
    running = [t for t in (running_mean, running_var) if t is not None]
    for t in (input, weight, bias, *running):
        if t.device is not CPU or t.dtype not in _ROUNDED or type(t._data) is not _np.ndarray:
            return None
    for t in running:
        a = t._data
        if t._base is not None or t._requires_grad or not (a.flags.writeable and a.flags.c_contiguous):
            return None
    eps = float(eps)
    x = input._data
    size, c = x.size, x.shape[1]
    rec = _bn.BATCH_NORM_FORWARD.run(_np, x, weight._data, bias._data, eps=eps)
    stats = rec[size:].reshape(2, c).copy()   # (a view would keep the record alive)
    for t, new, w in ((running_mean, stats[0], False), (running_var, _unbiased(stats[1], n), wide)):
        if t is not None:
            t._data[...] = _running_update_impl(_np, t._data, new, momentum=_factor(t, momentum), wide=w)
            t._vbox[0] += 1
    dt = input.dtype
    y = Tensor._wrap(rec[:size].reshape(x.shape), dt, CPU)
    if input._requires_grad or weight._requires_grad or bias._requires_grad:
        if is_grad_enabled():
            make_prim_node(_bn.BATCH_NORM_VALUES, (Tensor._wrap(rec, dt, CPU), input, Tensor._wrap(stats, dt, CPU),
                                                   weight, bias), {"eps": eps}, y)
    return y


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalize each of ``num_groups`` channel groups of each sample."""
    c = _check_args("group_norm", input, 2, weight=weight, bias=bias)
    if num_groups <= 0 or c % num_groups:
        raise ArgumentError(f"group_norm: the number of channels ({c}) of input shape {tuple(input.shape)} "
                            f"must be divisible by num_groups ({num_groups})")
    n = input.shape[0]
    per_group = (n, c // num_groups) + tuple(input.shape[2:])
    if all(isinstance(v, int) for v in per_group) and int(_np.prod(per_group)) == 1:
        # (PyTorch's check, which it makes in eval mode too)
        raise ValueError(f"group_norm: expected more than 1 value per channel when training, got input "
                         f"of shape {tuple(input.shape)} with {num_groups} groups")
    # each group's values as one row of LayerNorm's primitive: one pass each way where the
    # composite's statistics took a dozen eager ops (the affine is per channel, after)
    from .layer_norm_prim import layer_norm
    g = reshape(in_opmath(input), (n, num_groups, math.prod(per_group[1:])))   # (not -1: an empty batch)
    y = reshape(layer_norm(g, 1, eps=eps), tuple(input.shape))
    return as_input(_affine(y, weight, bias), input)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalize each channel of each sample over its spatial dims.

    With running statistics and ``use_input_stats``, they are updated with the batch
    average of the per-instance mean and unbiased variance (as PyTorch does).
    """
    c = _check_args("instance_norm", input, 3, weight=weight, bias=bias, running_mean=running_mean,
                    running_var=running_var)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and running_var")
        return _inference(input, running_mean, running_var, weight, bias, eps)
    x = in_opmath(input)
    dims = tuple(range(2, input.ndim))
    n = math.prod(input.shape[2:])
    if n <= 1:
        raise ValueError(f"instance_norm: expected more than 1 spatial element when training, got "
                         f"input of shape {tuple(input.shape)}")
    if running_mean is not None or running_var is not None:
        with no_grad():
            mu, _, var = _stats(x.detach(), dims)
        if running_mean is not None:
            _update_running(running_mean, mean(reshape(mu, (-1, c)), 0), momentum)
        if running_var is not None:
            _update_running(running_var, mean(reshape(var, (-1, c)), 0) * (n / (n - 1)), momentum)
    # each (sample, channel) as one row of LayerNorm's primitive, as group_norm's groups:
    # one pass each way where the composite's statistics took a dozen eager ops
    from .layer_norm_prim import layer_norm
    rows = reshape(x, (input.shape[0], c, n))   # (not -1: an empty batch)
    y = reshape(layer_norm(rows, 1, eps=eps), tuple(input.shape))
    return as_input(_affine(y, weight, bias), input)
