"""Composite ops: written with primitives only, so gradients and fusion come for free."""
from __future__ import annotations

import numpy as np

from ..errors import (ArgumentError, DTypeError, ShapeError, expect_floating, expect_not_bool,
                      user_stacklevel)
from ..shapes import broadcast_shapes, normalize_dim
from .conv import _ntuple, _pair
from .conv_gemm import conv2d_gemm
from .depthwise import depthwise_conv2d
from .creation import arange
from .elementwise import (_binary, abs, cast, eq, isfinite, isnan, le, log, logical_and, logical_or, maximum, ne,
                          neg, where)
# GELU is a primitive (ops/gelu_prim.py: as a composite, eager mode made ~27 passes per GELU
# forward and backward where PyTorch makes two); re-exported here with the activations.
from .gelu_prim import gelu
from .leaky_relu_prim import leaky_relu as _leaky_relu_prim
from .silu_elu_prim import silu as _silu_prim
from .embedding_renorm import renorm_rows
from .softplus_prim import softplus  # (also re-exported: its old home)
from . import pooling_prim as _pool_prim
from .pooling_nd import widened
from . import pool_offsets as _pool_offsets
from . import log_softmax_prim as _log_softmax_prim, softmax_prim as _softmax_prim
from . import layer_norm_prim as _ln_prim
from . import cross_entropy_prim as _ce_prim
from . import one_hot_prim as _one_hot_prim
from .indexing import gather, getitem, in_range
from .value_checks_prim import in_unit_interval
from .random import rand, rand_like
from .eager import bind, trace_state
from .reductions import all as _all, amax, mean, sum
from .shape import contiguous, reshape, squeeze, unsqueeze
from . import autocast as _autocast, bf16_eager as _bf16_eager
from .. import dtypes as _dt
from .dtype_checks import takes
from .opmath import as_input, in_opmath
from ..autograd.grad_mode import is_grad_enabled

__all__ = ["gelu", "softmax", "log_softmax", "layer_norm", "dropout", "embedding", "one_hot",
           "conv2d", "max_pool2d", "avg_pool2d", "mse_loss", "l1_loss", "cross_entropy", "nll_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "silu", "softplus",
           "leaky_relu", "logsigmoid", "isclose", "allclose"]

@takes("x:input")
def silu(x):
    return _silu_prim(x)   # one pass each way (silu_elu_prim.py)


@takes("x:input")
def leaky_relu(x, negative_slope: float = 0.01):
    if isinstance(negative_slope, (int, float)) and negative_slope >= 0 and not isinstance(x, (int, float)):
        return _leaky_relu_prim(x, negative_slope)   # one pass each way (leaky_relu_prim.py)
    return where(x > 0, x, x * negative_slope)


@takes("x:input")
def logsigmoid(x):
    # -softplus(-x) is min(x, 0) - log1p(e^-|x|) (stable) with the gradient sigmoid(-x), whose
    # own derivative is right at 0 (the composite's kinks gave 0 there, not -1/4)
    return 0.0 - softplus(neg(x), 1.0, float("inf"))   # (0 - 0 is +0, as PyTorch's)


def isclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    """A finite |a - b| <= atol + rtol * |b| elementwise, or a == b (inf is close to inf only)."""
    if getattr(a, "dtype", None) is _dt.bool_ and getattr(b, "dtype", None) is _dt.bool_:
        return eq(a, b)   # (bools have no difference; PyTorch compares them)
    err = abs(a - b)
    close = logical_or(logical_and(le(err, atol + rtol * abs(b)), isfinite(err)), eq(a, b))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    return bool(_all(isclose(a, b, rtol, atol, equal_nan)).item())


def _empty_dim(x, dim: int) -> bool:
    """Whether `x` has dim `dim` (normalized) of size 0 (a concrete 0: a traced size may be
    symbolic); the array's own shape where there is one, not a Size per test."""
    d = x._data
    shape = d.shape if type(d) is np.ndarray else x.shape
    return len(shape) > 0 and isinstance(shape[dim], int) and shape[dim] == 0


def _along(op: str, prim_fn, x, dim: int, dtype):
    """``prim_fn(x, dim)``, softmax's or log_softmax's primitive (one op forward, one
    backward, eager and traced), after PyTorch's `dtype` cast and checks."""
    dim = normalize_dim(dim, x.ndim, op)
    if dtype is not None:
        x = cast(x, dtype)
    if _empty_dim(x, dim):
        # (the primitives' rules check the dtype, but an empty dim never reaches them)
        expect_floating(op, "input", x)
        return x * 1.0  # nothing to normalize (and no max to subtract)
    if x.ndim == 0:     # one element: a 1-element row
        return reshape(prim_fn(reshape(x, (1,)), 0), ())
    return as_input(prim_fn(in_opmath(x), dim), x)   # (a half row: in float32, as PyTorch's)


def softmax(x, dim: int = -1, dtype=None, axis=None):
    return _along("softmax", _softmax_prim.softmax, x, dim if axis is None else axis, dtype)


def log_softmax(x, dim: int = -1, dtype=None, axis=None):
    # (log_softmax's backward reads its result, as PyTorch's)
    return _along("log_softmax", _log_softmax_prim.log_softmax, x, dim if axis is None else axis, dtype)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    shape = tuple(input.shape)
    if not ns or shape[len(shape) - len(ns):] != ns:   # (() would normalize each element alone)
        raise ShapeError(f"layer_norm: normalized_shape {ns} is empty or does not match the last dims of input "
                         f"shape {tuple(input.shape)}")
    return _ln_prim.layer_norm(input, len(ns), weight, bias, eps)   # one op each way, eager and traced


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    return masked_dropout("dropout", input, p, training, inplace)


def masked_dropout(op: str, x, p: float, training: bool, inplace: bool, shape=None):
    """Dropout of `x` by a keep mask of `shape` (None: x's; else broadcast along x's size-1
    dims, whole channels), the kept values scaled by 1 / (1 - p)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, got {p}")
    if not training or p == 0.0:
        return x
    from .activation import apply_inplace   # (activation.py imports this module)
    if p == 1.0:
        return apply_inplace(x, lambda v: v * 0.0, inplace)
    draw = rand_like(x) if shape is None else rand(*shape, dtype=x.dtype, device=x.device)
    keep = cast(draw >= p, x.dtype)
    return apply_inplace(x, lambda v: v * keep * (1.0 / (1.0 - p)), inplace)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False):
    """Rows of `weight` at `input`'s indices. With max_norm, the rows looked up whose
    norm exceeds it are first scaled down in `weight` itself (in place, as PyTorch does);
    scale_grad_by_freq divides each row's gradient by how often the batch uses it.
    ``sparse`` is accepted; gradients here are dense (rows not looked up get zero)."""
    if max_norm is not None or scale_grad_by_freq:
        return _embedding_options(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)
    if not input.dtype.is_integer:
        raise DTypeError(f"embedding: indices must be an integer tensor, got {input.dtype.name}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, dim), got {tuple(weight.shape)}")
    input = in_range(input, weight.shape[0], "embedding")
    if padding_idx is not None and (weight.requires_grad or trace_state.tracer is not None):
        # The padding row is read but never trained: take it from a detached copy. (A
        # capture may differentiate a weight its tracer does not mark as requiring grad.)
        n = weight.shape[0]
        pad = padding_idx + n if padding_idx < 0 else padding_idx
        m = input.numel()
        if isinstance(m, int) and isinstance(n, int) and m < n:
            # fewer lookups than rows (a vocabulary): mask the rows looked up, not the
            # whole table, a pass over each forward and backward either way
            out = getitem(weight, input)
            return where(unsqueeze(eq(input, pad), -1), out.detach(), out)
        is_pad = unsqueeze(eq(arange(n, device=weight.device), pad), 1)
        weight = where(is_pad, weight.detach(), weight)
    return getitem(weight, input)


def _embedding_options(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq):
    from .reductions_more import bincount
    from .numpy_like import ravel
    if max_norm is not None:
        renorm_rows(input, weight, max_norm, norm_type)
    out = embedding(input, weight, padding_idx)
    if scale_grad_by_freq:
        counts = getitem(bincount(ravel(input), minlength=weight.shape[0]), input)
        s = unsqueeze(1.0 / cast(counts, out.dtype), -1)
        out = out.detach() + (out - out.detach()) * s   # the same values; gradient / count
    return out


def one_hot(tensor, num_classes: int = -1):
    if not tensor.dtype.is_integer:
        raise DTypeError(f"one_hot: expected an integer tensor, got {tensor.dtype.name}")
    if num_classes < 0:
        if not tensor.numel():
            raise ArgumentError("one_hot: cannot infer the number of classes from an empty tensor; pass num_classes")
        num_classes = int(amax(tensor).item()) + 1
    return bind(_one_hot_prim.ONE_HOT, tensor, num_classes=int(num_classes))


def check_conv_args(op: str, x, weight, bias, stride, padding, dilation, groups: int) -> None:
    """PyTorch's checks of a convolution's arguments, on the shapes the caller passed (so a
    conv1d error talks about conv1d and 3-D shapes): channels against the weight and
    groups, the bias, positive strides and dilations, non-negative padding."""
    o, cg = weight.shape[0], weight.shape[1]
    if not isinstance(groups, int) or groups < 1 or o % groups:
        raise ShapeError(f"{op}: out_channels {o} of weight {tuple(weight.shape)} must be "
                         f"divisible by groups={groups}")
    if x.shape[1] != cg * groups:
        raise ShapeError(f"{op}: input of shape {tuple(x.shape)} has {x.shape[1]} channels but weight "
                         f"{tuple(weight.shape)} with groups={groups} expects {cg * groups}")
    if bias is not None and tuple(bias.shape) != (o,):
        raise ShapeError(f"{op}: bias of shape {tuple(bias.shape)} should be ({o},)")
    for name, v, least in (("stride", stride, 1), ("dilation", dilation, 1), ("padding", padding, 0)):
        if type(v) is int and v >= least or isinstance(v, str):   # (the common call: no tuple)
            continue
        vs = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
        if any(int(e) < least for e in vs):
            what = "positive" if least else "non-negative"
            raise ArgumentError(f"{op}: {name} must be {what}, got {v!r}")


def string_padding(op: str, x, padding: str, kernel: tuple, strided: bool, dilation: tuple):
    """(`x`, padding) for a convolution's padding 'valid' (none) or 'same' (`same_padding`;
    refused with a stride). `kernel`, `dilation`: one entry per spatial dim."""
    if padding == "valid":
        return x, 0
    if padding != "same":
        raise ValueError(f"{op}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    if strided:
        raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
    return same_padding(x, kernel, dilation)


def same_padding(x, kernel: tuple, dilation: tuple):
    """(`x` padded, symmetric padding) giving padding='same': each spatial dim gets
    ``dilation * (k - 1)`` in all, half on each side; an odd total puts the extra one on
    the right (bottom), as PyTorch does. `kernel`, `dilation`: one entry per spatial dim
    (the last dims of `x`)."""
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    left = tuple(t // 2 for t in totals)
    extra = [t - 2 * lo for t, lo in zip(totals, left)]
    if any(extra):
        from .spatial import pad
        widths = []
        for e in reversed(extra):     # pad() lists (before, after) from the last dim
            widths += [0, e]
        x = pad(x, widths)
    return x, left


@_autocast.lower_widened
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    if x.ndim == 3 and weight.ndim == 4:  # unbatched (C, H, W) input, as PyTorch allows
        return squeeze(conv2d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0)
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv2d: expected 4-D input and weight, got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    check_conv_args("conv2d", x, weight, bias, stride, padding, dilation, groups)
    return checked_conv2d(x, weight, bias, stride, padding, dilation, groups)


def checked_conv2d(x, weight, bias, stride, padding, dilation, groups: int):
    """conv2d of 4-D `x` and `weight` whose arguments `check_conv_args` accepted (conv1d
    checks them itself, on its own shapes, and passes 3-D ones: one record of the same
    primitives, ops/conv_gemm.py `as_2d`)."""
    if x.dtype is _dt.bfloat16:
        wide = _bf16_eager.widened(x, weight, bias)
        if wide is not None:    # (computed in float32, rounded once)
            return cast(checked_conv2d(*wide, stride, padding, dilation, groups), _dt.bfloat16)
    o, cg = weight.shape[:2]
    nd = weight.ndim - 2
    stride, dilation = _ntuple(stride, nd, "stride", "conv2d"), _ntuple(dilation, nd, "dilation", "conv2d")
    if isinstance(padding, str):
        x, padding = string_padding("conv2d", x, padding, tuple(weight.shape[2:]), stride != (1,) * nd, dilation)
    padding, c = _ntuple(padding, nd, "padding", "conv2d"), x.shape[1]
    # One primitive. ops/conv_gemm.py: a backend runs it by blocks of images whose columns
    # stay in cache, each group's product on its slice of them, the result NCHW with no
    # transposing copy, the bias added in cache and its gradient summed with the weight's.
    # Depthwise (ops/depthwise.py): a direct loop over the (image, channel) planes; as
    # columns each output's kh*kw products cost a column copy and a tiny GEMM
    fold = bias is not None and bias.dtype == weight.dtype == x.dtype
    if cg == 1 and groups == c > 1:
        out = depthwise_conv2d(x, weight, bias if fold else None, stride, padding, dilation)
    else:
        out = conv2d_gemm(x, weight, bias if fold else None, stride, padding, dilation, groups)
    if bias is not None and not fold:
        out = out + reshape(bias, (1, o) + (1,) * nd)
    return _conv_result(out)


def _conv_result(t):
    """conv2d's result, a permuted view of its GEMM's [O, N, ...] output. Eagerly it is
    made contiguous as PyTorch's is, so ``x.view(x.size(0), -1)`` after a convolution works
    (and layers after it keep seeing contiguous data); a captured graph keeps the view,
    whose layout the compiled plan chooses, since nothing can observe it there."""
    if trace_state.tracer is None:
        return contiguous(t)
    return _own_value(t)


def _own_value(t):
    """`t`, which may view an intermediate nothing else holds (conv2d's output is a permuted
    view of its GEMM's result), as a value of its own: a captured in-place op on it
    (``nn.ReLU(inplace=True)`` after a convolution) then rebinds it as any value, and an
    eager one is a plain in-place op, not a costly write through a view. PyTorch's
    convolution returns a fresh tensor; nothing can observe the base here."""
    if getattr(t, "_view_src", None) is not None:
        t._view_src = None
    if getattr(t, "_base", None) is not None:
        t._base = None
    return t


def check_pool_args(op: str, kernel_size, stride, padding, dilation=1) -> None:
    """Positive kernel, stride and dilation, non-negative padding (PyTorch's checks, named:
    a zero stride divided by zero in the output size)."""
    for name, v, least in (("kernel_size", kernel_size, 1), ("stride", stride, 1),
                           ("padding", padding, 0), ("dilation", dilation, 1)):
        if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
            continue                                   # stride None or []: the kernel size
        if min(_pair(v, name, op)) < least:
            raise ArgumentError(f"{op}: {name} must be {'positive' if least else 'non-negative'}, got {v!r}")


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    check_pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    expect_not_bool("max_pool2d", "input", x)   # (PyTorch's max_pool2d has no bool kernel)
    if ceil_mode:
        from .spatial import max_pool2d_ext
        return max_pool2d_ext(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    if x.ndim == 3:  # unbatched (C, H, W)
        out = max_pool2d(unsqueeze(x, 0), kernel_size, stride, padding, dilation,
                         return_indices=return_indices)
        if return_indices:
            return squeeze(out[0], 0), squeeze(out[1], 0)
        return squeeze(out, 0)
    if x.ndim != 4:
        raise ShapeError(f"max_pool2d: expected a 3-D or 4-D input, got shape {tuple(x.shape)}")
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    p, d = _pair(padding), _pair(dilation)
    if return_indices:   # (the values gathered at each window's first maximum, and its index)
        from .pooling_nd import max_pool2d_with_indices
        return max_pool2d_with_indices(x, k, s, p, d)
    # One primitive pair over the window offsets (ops/pooling_prim.py, whose shape rule
    # checks padding and size): unfold + amax and its fold backward cost ~10 ms per LeNet
    # step; the gradient goes to the first maximum.
    if _pool_offsets.applies(x, k):   # floating: the forward records offsets for the backward
        out = _pool_offsets.max_pool2d(x, k, s, p, d)
    elif x.dtype.is_floating_point:   # float16 windows past its exact offsets: pooled in
        # float32, whose record holds them (the casts are exact both ways)
        out = cast(_pool_offsets.max_pool2d(cast(x, _dt.float32), k, s, p, d), x.dtype)
    else:                             # integers: no gradient
        out = _pool_prim.max_pool2d(x, k, s, p, d)
    return out


@takes("x:input", also=(_dt.int64,))
def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    check_pool_args("avg_pool2d", kernel_size, stride, padding)
    if (out := widened(avg_pool2d, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)) is not None:
        return out
    if ceil_mode or not count_include_pad or divisor_override is not None or x.ndim == 3:
        from .pooling_nd import avg_pool2d_ext
        return avg_pool2d_ext(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override)
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    # Sum of window-offset views (ops/pooling_prim.py), not unfold + mean + fold.
    return _pool_prim.avg_pool2d(x, k, s, _pair(padding), (1, 1))


# ---------------------------------------------------------------- losses
def _reduce(loss, reduction: str):
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_same(op, input, target):
    if tuple(input.shape) != tuple(target.shape):
        raise ShapeError(f"{op}: input shape {tuple(input.shape)} and target shape "
                         f"{tuple(target.shape)} differ")


def _warn_broadcast(op, input, target):
    """PyTorch's regression losses broadcast a target of another shape, with a warning
    (a (N, 1) prediction against an (N,) target is an (N, N) loss: rarely what was meant)."""
    if tuple(input.shape) != tuple(target.shape):
        import warnings
        try:
            broadcast_shapes(op, tuple(input.shape), tuple(target.shape))
        except ShapeError:
            raise ShapeError(f"{op}: input shape {tuple(input.shape)} and target shape "
                             f"{tuple(target.shape)} cannot be broadcast together") from None
        warnings.warn(f"{op}: using a target size {tuple(target.shape)} that is different to the input "
                      f"size {tuple(input.shape)}; this will likely lead to incorrect results due to "
                      f"broadcasting. Please ensure they have the same size.", UserWarning, stacklevel=user_stacklevel())


def _legacy(size_average, reduce, reduction: str) -> str:
    """`reduction`, or what PyTorch's deprecated ``size_average``/``reduce`` ask for (losses.py)."""
    if size_average is None and reduce is None:
        return reduction
    from .losses import legacy_reduction   # (losses imports this module)
    return legacy_reduction(size_average, reduce, reduction)


@_autocast.fp32
def mse_loss(input, target, reduction: str = "mean", *, size_average=None, reduce=None):
    reduction = _legacy(size_average, reduce, reduction)
    _warn_broadcast("mse_loss", input, target)
    expect_floating("mse_loss", "input", input)
    d = input - target
    if d.dtype.is_complex:
        raise DTypeError("mse_loss: complex tensors are not supported (PyTorch's is not either); "
                         "use (a - b).abs().pow(2).mean()")
    return _reduce(d * d, reduction)


@_autocast.fp32
def l1_loss(input, target, reduction: str = "mean", *, size_average=None, reduce=None):
    reduction = _legacy(size_average, reduce, reduction)
    _warn_broadcast("l1_loss", input, target)
    return _reduce(abs(input - target), reduction)


@_autocast.fp32
def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean", *,
             size_average=None, reduce=None):
    reduction = _legacy(size_average, reduce, reduction)
    if input.ndim == 1 and target.ndim == 0:  # one unbatched sample
        out = nll_loss(unsqueeze(input, 0), unsqueeze(target, 0), weight, ignore_index, reduction)
        return squeeze(out, 0) if reduction == "none" else out
    if input.ndim < 2 or tuple(target.shape) != tuple(input.shape[:1]) + tuple(input.shape[2:]):
        raise ShapeError(f"nll_loss: expected input (N, C, ...) and target (N, ...), got "
                         f"{tuple(input.shape)} and {tuple(target.shape)}")
    expect_floating("nll_loss", "input", input)
    if not target.dtype.is_integer:
        raise TypeError(f"nll_loss: target must hold class indices (integer), got {target.dtype.name}")
    _check_class_weight("nll_loss", weight, input.shape[1])
    if _ce_prim.applies(input, target, weight, 0.0, nll=True):   # (N, C, d1, ...) too
        return _ce_prim.nll_indices(input, target, ignore_index, reduction)
    valid = ne(target, ignore_index)
    safe_t = where(valid, target, 0)
    safe_t = in_range(safe_t, input.shape[1], "nll_loss")
    picked = squeeze(gather(input, 1, unsqueeze(safe_t, 1)), 1)
    w = cast(valid, input.dtype)
    if weight is not None:
        w = w * getitem(weight, safe_t)
    loss = neg(picked) * w
    if reduction == "mean":
        return _weighted_mean(sum(loss), sum(w))
    return _reduce(loss, reduction)


def _weighted_mean(total, weight):
    """total / weight, as PyTorch's weighted mean of a loss: nan when no target counts
    (weight 0), with a zero gradient rather than 0 * inf (one SGD step of an all-padding
    batch would otherwise make every weight nan)."""
    empty = eq(weight, 0.0)
    return where(empty, float("nan"), total / where(empty, 1.0, weight))


def _check_class_weight(op: str, weight, c) -> None:
    if weight is not None and tuple(weight.shape) != (c,):
        raise ShapeError(f"{op}: weight should hold one value per class ({c} classes), got shape "
                         f"{tuple(weight.shape)}")


@_autocast.fp32
def cross_entropy(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, *, size_average=None, reduce=None):
    reduction = _legacy(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:   # (also refuses nan)
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    expect_floating("cross_entropy", "input", input)
    if input.ndim >= 1:
        _check_class_weight("cross_entropy", weight, input.shape[1 if input.ndim > 1 else 0])
    if _ce_prim.applies(input, target, weight, label_smoothing):
        # (N, C) logits and class indices (ops/cross_entropy_prim.py). PyTorch's graph keeps
        # log_softmax's result, not the logits, so they may be written in place before
        # backward(). A capture's argument: log_softmax, then nll_loss's primitive, as
        # PyTorch; eagerly the one-pass primitive keeps a copy of non-leaf logits (the same
        # memory as PyTorch's log-probabilities; the two steps cost 32x27 logits 40% more).
        if trace_state.tracer is not None and input.requires_grad and is_grad_enabled():
            return _ce_prim.nll_indices(log_softmax(input, 1), target, ignore_index, reduction)
        loss = _ce_prim.cross_entropy_indices(input, target, ignore_index, reduction)
        if input.grad_fn is not None and loss.grad_fn is not None:
            loss.grad_fn.keep_input(input)
        return loss
    cdim = 1 if input.ndim > 1 else 0
    c = input.shape[cdim]
    logp = log_softmax(input, cdim)
    if target.dtype.is_floating_point:  # class probabilities
        if ignore_index != -100:   # (no class index to ignore: PyTorch refuses it too)
            raise DTypeError(f"cross_entropy: ignore_index={ignore_index} is not supported for a "
                             f"floating point target of class probabilities")
        if tuple(input.shape) != tuple(target.shape) and target.ndim == input.ndim - 1:
            # Shaped like class indices: the dtype, not the shape, is what is wrong.
            raise DTypeError(f"cross_entropy: target of shape {tuple(target.shape)} holds class indices "
                            f"but has dtype {target.dtype.name}; class-index targets must be an integer "
                            f"tensor (int64, as PyTorch expects, or int32), e.g. target.long(). "
                            f"Floating targets are class probabilities of the input's shape "
                            f"{tuple(input.shape)}")
        _check_same("cross_entropy", input, target)
        if label_smoothing > 0.0:
            target = target * (1.0 - label_smoothing) + label_smoothing / c
        lw = logp if weight is None else logp * _class_view(weight, input.ndim)
        return _reduce(neg(sum(lw * target, cdim)), reduction)
    unbatched = input.ndim == 1
    if unbatched:
        logp = unsqueeze(logp, 0)
        target = unsqueeze(target, 0)
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing > 0.0:
        # PyTorch's form: (1 - e) * nll + e / C * sum_c(-w_c * logp_c), the second term
        # reduced like the first (a weighted mean divides by the targets' total weight).
        valid = cast(ne(target, ignore_index), logp.dtype)
        lw = logp if weight is None else logp * _class_view(weight, logp.ndim)
        smooth = neg(sum(lw, 1)) * valid
        if reduction == "mean":
            w = valid if weight is None else getitem(weight, where(ne(target, ignore_index), target, 0)) * valid
            smooth = _weighted_mean(sum(smooth), sum(w))
        else:
            smooth = _reduce(smooth, reduction)
        loss = loss * (1.0 - label_smoothing) + smooth * (label_smoothing / c)
    if unbatched and reduction == "none":
        loss = squeeze(loss, 0)
    return loss


def _class_view(weight, ndim):
    """Per-class weights shaped to broadcast along dim 1 of an (N, C, ...) tensor."""
    return reshape(weight, (1, -1) + (1,) * (ndim - 2)) if ndim > 1 else weight


def _clamped_log(p):
    pos = p > 0.0
    return where(pos, maximum(log(where(pos, p, 1.0)), -100.0), -100.0)


def _bce_impl(xp, x, t):
    # PyTorch clamps the logs at -100, so p in {0, 1} gives a finite loss
    with np.errstate(divide="ignore"):
        return -(t * xp.maximum(xp.log(x), -100.0) + (1 - t) * xp.maximum(xp.log(1 - x), -100.0))


def _bce_vjp(g, out, x, t):
    # PyTorch's gradient: (x - t) / max(x (1 - x), 1e-12), so an input saturated at the
    # wrong end (x = 0, t = 1: a float32 sigmoid's exact 0) still gets a large push, and
    # one at the right end gets 0
    return (g * (x - t) / maximum((1.0 - x) * x, 1e-12), g * (_clamped_log(1.0 - x) - _clamped_log(x)))


def _bce_scalar(e, x, t):
    zero, one, floor = e.const(0), e.const(1), e.const(-100.0)

    def clamped_log(p):   # (no log(0) in the kernel; a NaN, from p < 0, stays NaN as numpy's)
        lg = e.call("log", f"({p} if {p} != {zero} else {one})")
        return f"({floor} if {p} == {zero} else ({lg} if ({lg} > {floor} or {lg} != {lg}) else {floor}))"
    return f"(-({t} * {clamped_log(x)} + ({one} - {t}) * {clamped_log(f'({one} - {x})')}))"


BCE_TERMS = _binary("bce_terms", _bce_impl, _bce_vjp, _bce_scalar, save=lambda rq: (0, 1))


@_autocast.fp32
def binary_cross_entropy(input, target, weight=None, reduction: str = "mean", *, size_average=None, reduce=None):
    reduction = _legacy(size_average, reduce, reduction)
    _check_same("binary_cross_entropy", input, target)
    if not target.dtype.is_floating_point:
        raise DTypeError(f"binary_cross_entropy: target must be a floating point tensor of probabilities "
                         f"like the input ({input.dtype.name}), got {target.dtype.name}; use target.float()")
    input = in_unit_interval(input, "binary_cross_entropy", "input")
    target = in_unit_interval(target, "binary_cross_entropy", "target")
    loss = bind(BCE_TERMS, input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@_autocast.fp32
def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean",
                                     pos_weight=None, *, size_average=None, reduce=None):
    reduction = _legacy(size_average, reduce, reduction)
    _check_same("binary_cross_entropy_with_logits", input, target)
    expect_floating("binary_cross_entropy_with_logits", "input", input)
    # -[pw*t*log(s) + (1-t)*log(1-s)] with s = sigmoid(x) and log(1-s) = log(s) - x is
    # (1-t)*x - (1 + (pw-1)*t) * logsigmoid(x): overflow-free, and its gradient is right at 0.
    ls = logsigmoid(input)
    loss = (1.0 - target) * input - (ls if pos_weight is None else ((pos_weight - 1.0) * target + 1.0) * ls)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)
