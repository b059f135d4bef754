"""Composite losses and distances beyond composite.py's core set, with PyTorch's signatures:

smooth_l1_loss, huber_loss, kl_div, cosine_similarity, pairwise_distance,
margin_ranking_loss, triplet_margin_loss, hinge_embedding_loss, cosine_embedding_loss,
linear_cross_entropy.
"""
from __future__ import annotations

import warnings

from ..errors import DTypeError, ShapeError, expect_floating, user_stacklevel
from .composite import _check_same, _reduce, _warn_broadcast
from .elementwise import abs, clamp, eq, exp, log, maximum, minimum, ne, relu, sqrt, where
from .reductions import norm as _vector_norm, sum
from . import autocast as _autocast
from .smooth_l1_prim import smooth_l1_term

__all__ = ["smooth_l1_loss", "huber_loss", "kl_div", "cosine_similarity", "pairwise_distance",
           "margin_ranking_loss", "triplet_margin_loss", "hinge_embedding_loss", "cosine_embedding_loss",
           "linear_cross_entropy"]


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """The reduction PyTorch's deprecated ``size_average``/``reduce`` pair asks for, when either
    is given (with PyTorch's warning); else `reduction`."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    out = ("mean" if size_average else "sum") if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{out}' instead.",
                  UserWarning, stacklevel=user_stacklevel())
    return out


@_autocast.fp32
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    """0.5 * d^2 / beta where |d| < beta, |d| - 0.5 * beta elsewhere (plain L1 when beta == 0)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _warn_broadcast("smooth_l1_loss", input, target)
    expect_floating("smooth_l1_loss", "input", input)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    diff = input - target
    if beta == 0:
        return _reduce(abs(diff), reduction)
    return _reduce(smooth_l1_term(diff, beta), reduction)


@_autocast.fp32
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    """0.5 * d^2 where |d| < delta, delta * (|d| - 0.5 * delta) elsewhere."""
    _warn_broadcast("huber_loss", input, target)
    expect_floating("huber_loss", "input", input)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    return _reduce(smooth_l1_term(input - target, delta, huber=True), reduction)


@_autocast.fp32
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """Pointwise target * (log(target) - input) with ``input`` log-probabilities.

    ``reduction='batchmean'`` divides the sum by the batch size (the mathematically
    correct KL divergence); 'mean' averages over every element, as PyTorch does.
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_same("kl_div", input, target)
    if not (input.dtype.is_floating_point or input.dtype.is_complex):   # (a RuntimeError there)
        raise DTypeError(f"kl_div: expected input to be a floating point tensor of log-probabilities, "
                         f"got {input.dtype.name}")
    if log_target:
        loss = exp(target) * (target - input)
    else:
        # target * log(target) is 0 where target is 0 (the limit); the log is taken of a
        # safe value there so neither the value nor its gradient becomes nan.
        pos = target > 0
        loss = where(pos, target * log(where(pos, target, 1.0)), 0.0) - target * input
    if reduction == "batchmean":
        total = sum(loss)
        return total / input.shape[0] if input.ndim else total
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the total loss by the number of elements, not "
                      "the batch size; use reduction='batchmean' for the KL divergence", stacklevel=user_stacklevel())
    return _reduce(loss, reduction)


def _norm(x, dim: int, keepdim: bool = False, root: bool = True):
    if x.dtype.is_complex:   # (the moduli's norm)
        x = x.abs()
    s = sum(x * x, dim, keepdim=keepdim)
    return sqrt(s) if root else s


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along ``dim`` (inputs broadcast)."""
    # (the squared norm clamped before the root: a zero vector's gradient is 0, not
    # sqrt's inf at 0 times maximum's 0)
    n1 = sqrt(maximum(_norm(x1, dim, True, root=False), eps * eps))
    n2 = sqrt(maximum(_norm(x2, dim, True, root=False), eps * eps))
    return sum((x1 / n1) * (x2 / n2), dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """||x1 - x2 + eps||_p along the last dim."""
    d = x1 - x2 + eps
    if x1.ndim == 0 and x2.ndim == 0:
        raise ShapeError("pairwise_distance: inputs must have at least one dimension")
    if p == 2:
        return _norm(d, -1, keepdim)
    if p == 1:
        return sum(abs(d), -1, keepdim=keepdim)
    return _vector_norm(d, p, -1, keepdim)   # (inf, -inf, 0 and fractional p)


@_autocast.fp32
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """max(0, -target * (input1 - input2) + margin)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if not (tuple(input1.shape) == tuple(input2.shape) == tuple(target.shape)):
        raise ShapeError(f"margin_ranking_loss: input1 {tuple(input1.shape)}, input2 "
                         f"{tuple(input2.shape)} and target {tuple(target.shape)} must have the same shape")
    return _reduce(relu(margin - target * (input1 - input2)), reduction)


@_autocast.fp32
def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
    """max(d(a, p) - d(a, n) + margin, 0) with the pairwise p-norm distance."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"triplet_margin_loss: margin must be greater than 0, got {margin}")
    if not (anchor.ndim == positive.ndim == negative.ndim) or anchor.ndim not in (1, 2):
        raise ShapeError(f"triplet_margin_loss: anchor {tuple(anchor.shape)}, positive "
                         f"{tuple(positive.shape)} and negative {tuple(negative.shape)} must all be "
                         f"1-D or all 2-D")
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = minimum(d_an, pairwise_distance(positive, negative, p, eps))
    return _reduce(clamp(d_ap - d_an + margin, 0.0), reduction)


@_autocast.fp32
def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """x where target == 1, max(0, margin - x) where target == -1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    margin_part = where(ne(target, 1), clamp(margin - input, 0.0), 0.0)
    self_part = where(ne(target, -1), input, 0.0)
    return _reduce(margin_part + self_part, reduction)


@_autocast.fp32
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                          reduction: str = "mean"):
    """1 - cos(x1, x2) where target == 1, max(0, cos(x1, x2) - margin) where target == -1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if input1.ndim not in (1, 2) or tuple(input1.shape) != tuple(input2.shape):
        raise ShapeError(f"cosine_embedding_loss: input1 {tuple(input1.shape)} and input2 "
                         f"{tuple(input2.shape)} must be equal-shaped 1-D or 2-D tensors")
    dim = input1.ndim - 1
    # PyTorch's form: a small epsilon inside each squared norm keeps 0-vectors finite.
    eps = 1e-12
    prod = sum(input1 * input2, dim)
    cos = prod / sqrt((sum(input1 * input1, dim) + eps) * (sum(input2 * input2, dim) + eps))
    pos = where(eq(target, 1), 1.0 - cos, 0.0)
    neg = where(eq(target, -1), clamp(cos - margin, 0.0), 0.0)
    return _reduce(pos + neg, reduction)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction: str = "mean",
                         ignore_index=None, label_smoothing: float = 0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``: the classes
    are linear_weight's first dim, its dims between first and last (out_features) those of a
    K-dimensional loss. `options` (PyTorch's chunking) changes nothing here."""
    from .composite import cross_entropy
    from .linalg import linear
    if input.ndim not in (1, 2):
        raise ShapeError(f"linear_cross_entropy: expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2 or linear_weight.shape[-1] != input.shape[-1]:
        raise ShapeError(f"linear_cross_entropy: linear_weight of shape {tuple(linear_weight.shape)} does not "
                         f"take input of shape {tuple(input.shape)} (in_features last)")
    classes = tuple(linear_weight.shape[:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != classes:
        raise ShapeError(f"linear_cross_entropy: expected linear_bias of shape {classes}, got "
                         f"{tuple(linear_bias.shape)}")
    if len(classes) > 1 and input.ndim == 1:
        raise ShapeError(f"linear_cross_entropy: a K-dimensional loss (linear_weight {tuple(linear_weight.shape)}) "
                         f"needs a batched input (N, {input.shape[-1]})")
    logits = linear(input, linear_weight.reshape(-1, input.shape[-1]),
                    None if linear_bias is None else linear_bias.reshape(-1))
    logits = logits.reshape(tuple(input.shape[:-1]) + classes)
    return cross_entropy(logits, target, weight=weight, reduction=reduction,
                         ignore_index=-100 if ignore_index is None else ignore_index, label_smoothing=label_smoothing)
