"""The rest of PyTorch's losses, as composites with its signatures and reductions:
gaussian_nll_loss, poisson_nll_loss, soft_margin_loss, multilabel_soft_margin_loss,
multilabel_margin_loss, multi_margin_loss, triplet_margin_with_distance_loss, ctc_loss.

``ctc_loss`` reduces the per-sequence losses of ops/ctc_prim.py's primitive, which takes
the targets and lengths as tensors (so it can be traced).
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import int64
from ..errors import ShapeError, expect_floating
from ..tensor import Tensor
from .composite import _reduce, logsigmoid
from .creation import tensor, zeros
from .elementwise import cast, clamp, exp, log, relu, where
from .indexing import gather
from .losses import legacy_reduction, pairwise_distance
from .reductions import mean, sum as _sum
from .shape import unsqueeze
from .registry import refuse_tracing
from . import autocast as _autocast
from .ctc_prim import ctc_nll

__all__ = ["gaussian_nll_loss", "poisson_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
           "multilabel_margin_loss", "multi_margin_loss", "triplet_margin_with_distance_loss", "ctc_loss"]


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean"):
    """0.5 * (log(max(var, eps)) + (input - target)^2 / max(var, eps)) (+ 0.5 log(2 pi))."""
    expect_floating("gaussian_nll_loss", "input", input)
    if isinstance(var, (int, float)):
        var = input * 0 + var
    if tuple(var.shape) != tuple(input.shape):
        if tuple(var.shape) == tuple(input.shape[:-1]):
            var = unsqueeze(var, -1)
        elif not (var.ndim == input.ndim and var.shape[-1] == 1
                  and tuple(var.shape[:-1]) == tuple(input.shape[:-1])):
            raise ValueError(f"gaussian_nll_loss: var of shape {tuple(var.shape)} does not match "
                             f"input of shape {tuple(input.shape)}")
    from .registry import trace_state
    if trace_state.tracer is None and bool((var < 0).any()):   # (a check of values: eager only)
        raise ValueError("gaussian_nll_loss: var has negative entries")
    # clamped for the value, as PyTorch does it in place under no_grad: the gradient
    # reaches var unchanged
    v = var + (clamp(var, min=eps) - var).detach()
    loss = 0.5 * (log(v) + (input - target) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@_autocast.fp32
def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = exp(input) - target * input
    else:
        loss = input - target * log(input + eps)
    if full:
        t = target
        stirling = t * log(where(t > 0, t, 1.0)) - t + 0.5 * log(where(t > 0, t, 1.0) * (2 * math.pi))
        loss = loss + where(t > 1, stirling, 0.0)
    return _reduce(loss, reduction)


@_autocast.fp32
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """log(1 + exp(-y x)) per element."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    expect_floating("soft_margin_loss", "input", input)
    return _reduce(-logsigmoid(target * input), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    expect_floating("multilabel_soft_margin_loss", "input", input)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = mean(loss, -1)
    return _reduce(loss, reduction)


@_autocast.fp32
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """sum over target classes j (the labels before the first -1) and non-target classes i of
    max(0, 1 - (x[j] - x[i])), divided by the number of classes."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    expect_floating("multilabel_margin_loss", "input", input)
    refuse_tracing("multilabel_margin_loss", "its target labels")
    unbatched = input.ndim == 1
    x = unsqueeze(input, 0) if unbatched else input
    t = unsqueeze(target, 0) if unbatched else target
    if tuple(t.shape) != tuple(x.shape):
        raise ShapeError(f"multilabel_margin_loss: target of shape {tuple(target.shape)} should match "
                         f"input {tuple(input.shape)}")
    tv = t.numpy().astype(np.int64)
    n, c = tv.shape
    # a row's labels end at its first -1 (array passes: a Python loop over every label
    # cost 1 ms for 64 x 32)
    valid = np.logical_and.accumulate(tv >= 0, axis=1)
    is_target = np.zeros((n, c), dtype=bool)
    is_target[np.nonzero(valid)[0], tv[valid]] = True
    idx = tensor(np.where(valid, tv, 0), device=x.device)
    xj = gather(x, 1, idx)                                         # (N, C): x at target j
    margins = relu(1 - (unsqueeze(xj, 2) - unsqueeze(x, 1)))       # (N, j, i)
    mask = valid[:, :, None] & ~is_target[:, None, :]
    loss = _sum(margins * tensor(mask, dtype=x.dtype, device=x.device), (1, 2)) / c
    if unbatched:
        loss = loss[0]
    return _reduce(loss, reduction)


@_autocast.fp32
def multi_margin_loss(input, target, p: int = 1, margin: float = 1.0, weight=None, size_average=None,
                      reduce=None, reduction: str = "mean"):
    """sum over i != y of max(0, margin - x[y] + x[i])^p (times weight[y]), over the classes."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    expect_floating("multi_margin_loss", "input", input)
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: only p == 1 and p == 2 are supported, got {p}")
    unbatched = input.ndim == 1
    x = unsqueeze(input, 0) if unbatched else input
    y = unsqueeze(target, 0) if unbatched else target
    c = x.shape[1]
    xy = gather(x, 1, unsqueeze(y, 1))                             # (N, 1)
    m = relu(margin - xy + x)
    if p == 2:
        m = m * m
    if weight is not None:
        m = m * unsqueeze(gather(weight, 0, y), 1)
    not_y = 1 - cast(unsqueeze(y, 1) == unsqueeze(tensor(np.arange(c), device=x.device), 0), x.dtype)
    loss = _sum(m * not_y, 1) / c
    if unbatched:
        loss = loss[0]
    return _reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin: float = 1.0, swap: bool = False, reduction: str = "mean"):
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: margin must be greater than 0, got {margin}")
    dist = distance_function if distance_function is not None else pairwise_distance
    dp, dn = dist(anchor, positive), dist(anchor, negative)
    if swap:
        from .elementwise import minimum
        dn = minimum(dn, dist(positive, negative))
    return _reduce(relu(dp - dn + margin), reduction)


def _lengths(v, n: int, what: str, device) -> Tensor:
    """`v` (a tensor, a list or one int) as an int64 tensor of `n` entries."""
    v = v if isinstance(v, Tensor) else tensor(v if isinstance(v, (list, tuple)) else [v] * n, device=device)
    if v.numel() != n:
        raise ShapeError(f"ctc_loss: {what} has {v.numel()} entries for a batch of {n}")
    return cast(v.reshape(-1), int64)


@_autocast.fp32
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False):
    """Connectionist temporal classification loss of log_probs (T, N, C) (or (T, C))."""
    unbatched = log_probs.ndim == 2
    lp = unsqueeze(log_probs, 1) if unbatched else log_probs
    if lp.ndim != 3:
        raise ShapeError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got {tuple(log_probs.shape)}")
    n = lp.shape[1]
    tg_len = _lengths(target_lengths, n, "target_lengths", lp.device)
    loss = ctc_nll(lp, unsqueeze(targets, 0) if unbatched else targets, tg_len,
                   _lengths(input_lengths, n, "input_lengths", lp.device), blank, zero_infinity)
    if zero_infinity:
        loss = where(loss == float("inf"), zeros((), dtype=loss.dtype, device=loss.device), loss)
    if reduction == "mean":
        return mean(loss / clamp(cast(tg_len, lp.dtype), min=1))
    if unbatched and reduction == "none":
        return loss[0]
    return _reduce(loss, reduction)

