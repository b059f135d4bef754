"""Training-mode batch norm as primitives: statistics, normalization, and its gradient.

Primitives rather than a composite of mean, sub, mul, rsqrt, add, each an eager pass over
the activation: here it is one fused pass forward and one backward:

- ``batch_norm_forward(x, weight, bias)`` -> (output, stats): a record primitive (output
  then (2, C) mean and biased variance, no gradient) and ``batch_norm_values``, the record's
  head in x's shape with batch_norm_train's VJP;
- that VJP is ``batch_norm_backward(g, x, stats, weight)`` -> flat record: the input
  gradient (channel-major), then (sum g, sum g*xhat) per channel, taken out as views.

``batch_norm_stats``, ``batch_norm_train`` and ``batch_norm_backward_reduce``/``_input``
are the same computations as separate passes (the records' numpy forms are built from
them). The VJP of batch_norm_train includes the statistics' dependence on x. The backward
primitives' own VJPs recompute the statistics with differentiable ops (`_moments`), so every
order of derivative is right.

The records' CPU kernels are their channel forms (`forward_form`, `backward_form`) rendered
by the compiler's one lowering (compiler/cpu/kernels/channel_forms.py); the numpy forms here
compute the same formulas for other array modules and dtypes.
"""
from __future__ import annotations

import numpy as np

from ..device import CPU
from ..shapes import numel
from ..tensor import Tensor
from .registry import Aval, defprim
from .eager import bind
from .grad_views import recording

__all__ = ["channel_sums", "batch_norm_stats", "batch_norm_train", "batch_norm_forward", "forward_form", "backward_form"]


# ---------------------------------------------------------------- kernels
def _count(shape) -> int:
    return numel(shape) // shape[1]


def channel_sums(xp, a3):
    """(C,): the sums of an (N, C, L) array over N and L, in its memory's order (one row
    per channel when channel-major), since ``a.sum((0, 2, 3))`` walks a slow 4-D iterator."""
    if xp is np and a3.strides[1] > a3.strides[0]:
        return _row_sums(a3.transpose(1, 0, 2).reshape(a3.shape[1], -1))
    acc = np.float32 if a3.dtype == np.float16 else None   # as numpy's mean of float16
    if a3.shape[2] == 1:   # (N, C): a reduce over the length-1 axis steps element by element
        return a3[:, :, 0].sum(axis=0, dtype=acc)
    return a3.sum(axis=2, dtype=acc).sum(axis=0)


def _channel_dots(xp, a3, b3):
    """(C,): the sums of a3 * b3 over N and L, as `channel_sums` of the products; by
    `_row_dots` (no products array) when both are channel-major. a3 is scratch: the
    products may be written into it."""
    if xp is np and a3.strides[1] > a3.strides[0] and b3.strides[1] > b3.strides[0]:
        rows = [a.transpose(1, 0, 2).reshape(a.shape[1], -1) for a in (a3, b3)]
        return _row_dots(*rows)
    return channel_sums(xp, xp.multiply(a3, b3, out=a3))


# Per-channel sums over contiguous rows by einsum for float32/float64: ~3x faster than
# np.sum's pairwise loop, sums products without writing them, and is single-threaded (bits
# independent of thread count).
_EINSUM_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _row_sums(rows):
    """(R,): the sums of a 2-D array's rows."""
    if rows.dtype in _EINSUM_DTYPES:
        return np.einsum("ij->i", rows)
    return rows.sum(axis=1, dtype=np.float32 if rows.dtype == np.float16 else None)


def _row_dots(a, b):
    """(R,): the sums of a * b row by row (2-D arrays of one shape and dtype); a may be
    overwritten (float16: the products, then `_row_sums`)."""
    if a.dtype in _EINSUM_DTYPES:
        return np.einsum("ij,ij->i", a, b)
    return _row_sums(np.multiply(a, b, out=a))


# ---------------------------------------------------------------- statistics
def _stats_rule(x):
    if x.ndim < 2:
        raise ValueError(f"batch_norm_stats: expected an input of at least 2 dims, got {x.shape}")
    return Aval((2, x.shape[1]), x.dtype, x.device)


def _stats_impl(xp, x, scratch=None):
    n, c = x.shape[0], x.shape[1]
    count = _count(x.shape)
    x3 = x.reshape(n, c, -1)
    mu = (channel_sums(xp, x3) / count).astype(x.dtype)
    # scratch: x's size in x's memory order (batch_norm_forward: its record's head, written
    # after) so the first step does not fault in a fresh temporary's pages
    d = xp.subtract(x3, mu.reshape(1, c, 1), out=scratch)
    return xp.stack([mu, _channel_dots(xp, d, d) / count]).astype(x.dtype)


BATCH_NORM_STATS = defprim("batch_norm_stats", _stats_impl, _stats_rule, None, kind="other")


# ---------------------------------------------------------------- normalization
def _channels(a, xp, c):
    return a.astype(np.float64).reshape(c) if xp is np else a.reshape(c)


def _train_rule(x, stats, weight, bias, eps):
    c = x.shape[1]
    for t, name, shape in ((stats, "stats", (2, c)), (weight, "weight", (c,)), (bias, "bias", (c,))):
        if tuple(t.shape) != shape:
            raise ValueError(f"batch_norm_train: {name} of shape {t.shape} should be {shape}")
    return Aval(x.shape, x.dtype, x.device)


def _train_impl(xp, x, stats, weight, bias, eps, out=None):
    c = x.shape[1]
    mean, var = stats[0].astype(np.float64), stats[1].astype(np.float64)
    a, d = _scale_shift(xp, _channels(weight, xp, c), _channels(bias, xp, c), mean, var, eps)
    if out is None and xp is np:
        out = np.empty(x.shape, x.dtype)
    return _affine_np(xp, x, a, d, out)


def _scale_shift(xp, w, b, mean, var, eps):
    """(a, d) of the normalization ``x * a + d`` per channel (float64): a = w * rstd,
    d = b - mean * a."""
    a = w / xp.sqrt(var + eps)
    return a, b - mean * a


def _affine_np(xp, x, a, d, out):
    """``x * a + d`` per channel, rounded to x's dtype after each op; into `out` when given
    (numpy: C-contiguous whatever x's order, so batch_norm_forward's record takes it with no
    transposing copy)."""
    view = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    a, d = a.astype(x.dtype).reshape(view), d.astype(x.dtype).reshape(view)
    if out is None:
        return x * a + d
    xp.multiply(x, a, out=out)
    return xp.add(out, d, out=out)


def _train_vjp(g, out, x, stats, weight, bias, eps):
    from .indexing import getitem
    parts = _eager_parts(g, x, stats, weight, eps)
    if parts is not None:
        return parts
    gx, red = _backward_parts(bind(BN_BACKWARD, g, x, stats, weight, eps=eps), tuple(x.shape))
    return gx, None, getitem(red, 1), getitem(red, 0)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _eager_parts(g, x, stats, weight, eps):
    """`_train_vjp`'s results from the backward record's array, wrapped as the views
    `_backward_parts` takes (8 eager ops fewer: ~15 us of a BatchNorm1d(64) backward), where
    no graph is recorded (`recording`) and the operands share float32 or float64; else None."""
    if recording(g, x, stats, weight) or x._data.dtype not in _FLOATS or any(
            t._data.dtype is not x._data.dtype for t in (g, stats, weight)):
        return None
    rec = BN_BACKWARD.run(np, g._data, x._data, stats._data, weight._data, eps=eps)
    shape = x._data.shape
    c, count = shape[1], _count(shape)
    gx = rec[:c * count].reshape((c, shape[0]) + shape[2:]).swapaxes(0, 1)
    red = rec[c * count:].reshape(2, c)
    dt = x.dtype
    return Tensor._wrap(gx, dt, CPU), None, Tensor._wrap(red[1], dt, CPU), Tensor._wrap(red[0], dt, CPU)


def _moments(x, eps):
    """(dims, view shape, n, x - mean, rstd) from differentiable ops: the backward
    primitives' own VJPs use these, so every order of derivative sees the statistics'
    dependence on x (the `stats` operand is non-differentiable)."""
    from .elementwise import rsqrt
    from .reductions import mean
    dims = (0,) + tuple(range(2, x.ndim))
    view = (1, -1) + (1,) * (x.ndim - 2)
    xc = x - mean(x, dims, keepdim=True)
    rstd = rsqrt(mean(xc * xc, dims, keepdim=True) + eps)
    return dims, view, _count(tuple(x.shape)), xc, rstd


def _rows(t, view):
    from .indexing import getitem
    from .shape import reshape
    return reshape(getitem(t, 0), view), reshape(getitem(t, 1), view)


BATCH_NORM_TRAIN = defprim("batch_norm_train", _train_impl, _train_rule, _train_vjp,
                           kind="other", save=lambda rq: (0, 1, 2), nondiff=(1,),
                           grad_name="NativeBatchNormBackward0", extra={"row_major": True})


# ---------------------------------------------------------------- backward
def _reduce_rule(g, x, stats, eps):
    if tuple(g.shape) != tuple(x.shape):
        raise ValueError(f"batch_norm_backward_reduce: gradient {g.shape} and input {x.shape} differ")
    return Aval((2, x.shape[1]), x.dtype, x.device)


def _reduce_impl(xp, g, x, stats, eps, scratch=None, g_like_x=None):
    # (sum g, sum g*xhat) = (sum g, rstd * sum g*(x - mean))
    mean = stats[0].astype(np.float64)
    rstd = 1.0 / xp.sqrt(stats[1].astype(np.float64) + eps)
    n, c = x.shape[0], x.shape[1]
    # Both sums over x's memory order: g_like_x is g's values in that order (`_backward_impl`
    # made it), else g is copied into it when the two differ (a conv's channel-major x
    # against pooling's C-contiguous gradient), so g*(x - mean) sums by rows, unwritten.
    if g_like_x is None:
        g_like_x = _g_like_x(xp, g, x)
    gl = (g if g_like_x is None else g_like_x).reshape(n, c, -1)
    gxc = xp.subtract(x.reshape(n, c, -1), mean.astype(x.dtype).reshape(1, c, 1), out=scratch)
    return xp.stack([channel_sums(xp, gl), _channel_dots(xp, gxc, gl) * rstd]).astype(x.dtype)


def _g_like_x(xp, g, x):
    """A copy of g in x's memory order when the two differ (numpy, more than 2 dims), else
    None: an op on mixed layouts costs ~2x the copy."""
    if xp is np and x.ndim > 2 and _channel_major(x) != _channel_major(g):
        gk = np.empty_like(x)
        np.copyto(gk, g)
        return gk
    return None


def _reduce_vjp(r, out, g, x, stats, eps):
    from .reductions import mean, sum
    dims, view, n, xc, rstd = _moments(x, eps)
    r0, r1 = _rows(r, view)
    gxhat = sum(g * xc, dims, keepdim=True) * rstd
    d_g = r0 + r1 * (xc * rstd)
    d_x = r1 * (rstd * (g - mean(g, dims, keepdim=True)) - gxhat * (rstd * rstd) * xc * (1.0 / n))
    return d_g, d_x, None


def _input_impl(xp, g, x, stats, weight, red, eps, out=None, spare=None):
    # gx = w*rstd*(g - sum_g/n - xhat*sum(g*xhat)/n) = a*g + b*x + d per channel, with
    # red = (sum g, sum g*xhat).
    c = x.shape[1]
    n = _count(x.shape)
    mean, var = stats[0].astype(np.float64), stats[1].astype(np.float64)
    rstd = 1.0 / xp.sqrt(var + eps)
    a, b, d = _input_coefficients(_channels(weight, xp, c), rstd, mean, red[0].astype(np.float64),
                                  red[1].astype(np.float64), n)
    return _input_np(xp, g, x, a, b, d, out, spare)


def _input_coefficients(w, rstd, mean, red0, red1, n):
    """(a, b, d) of the input gradient ``g * a + x * b + d`` per channel (float64), from
    red0, red1 = (sum g, sum g*xhat) (`_input_impl`)."""
    a = w * rstd
    b = -a * rstd * red1 / n
    return a, b, -a * red0 / n - b * mean


def _input_np(xp, g, x, a, b, d, out, spare=None):
    """``g*a + x*b + d`` per channel, rounded to x's dtype after each op; into `out` when
    given (batch_norm_backward: a channel-major view of its record, no copy after); x*b
    into `spare` when given (x's shape and order, free once g*a is out: `_backward_impl`)."""
    view = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    dt = x.dtype
    a, b, d = a.astype(dt).reshape(view), b.astype(dt).reshape(view), d.astype(dt).reshape(view)
    if out is None:
        return g * a + x * b + d
    xp.multiply(g, a, out=out)
    xp.add(out, x * b if spare is None else xp.multiply(x, b, out=spare), out=out)
    return xp.add(out, d, out=out)


def _input_vjp(u, out, g, x, stats, weight, red, eps):
    # gx = a*(g - red0/n) + b*(x - mean), a = w*rstd, b = -w*rstd^2*red1/n; mean and rstd
    # depend on x (d rstd/dx_i = -rstd^3 (x_i - mean)/n), red is an operand of its own.
    from .reductions import sum
    from .shape import reshape, stack
    dims, view, n, xc, rstd = _moments(x, eps)
    c = x.shape[1]
    w = reshape(weight, view)
    red0, red1 = _rows(red, view)
    r2 = rstd * rstd
    a = w * rstd
    b = -(w * r2 * red1) * (1.0 / n)
    gc = g - red0 * (1.0 / n)
    su = sum(u, dims, keepdim=True)
    su_gc = sum(u * gc, dims, keepdim=True)
    su_xc = sum(u * xc, dims, keepdim=True)
    d_x = b * (u - su * (1.0 / n)) + xc * (
        -(w * r2 * rstd * su_gc) * (1.0 / n) + (w * red1 * r2 * r2 * su_xc) * (2.0 / (n * n)))
    d_g = a * u
    d_w = reshape(sum(u * (rstd * gc - (r2 * red1) * (1.0 / n) * xc), dims), (c,))
    d_red = stack([reshape(-(a * su) * (1.0 / n), (c,)), reshape(-(w * r2 * su_xc) * (1.0 / n), (c,))])
    return d_g, d_x, None, d_w, d_red


BN_BACKWARD_REDUCE = defprim("batch_norm_backward_reduce", _reduce_impl, _reduce_rule,
                             _reduce_vjp, kind="other", save=lambda rq: (0, 1), nondiff=(2,))
BN_BACKWARD_INPUT = defprim("batch_norm_backward_input", _input_impl,
                            lambda g, x, *rest, **p: Aval(x.shape, x.dtype, x.device), _input_vjp,
                            kind="other", save=lambda rq: (0, 1, 3, 4), nondiff=(2,))


# ---------------------------------------------------------------- the backward as one pass
# batch_norm_backward(g, x, stats, weight) -> flat record (C*N*L + 2*C,): the input gradient
# channel-major (the rows the convolution backward's GEMM reads, kept aligned), then
# (sum g, sum g*xhat). Primitives have one output, so the results share one array and are
# taken out as non-overlapping views (`_backward_parts`).
def _backward_rule(g, x, stats, weight, eps):
    if tuple(g.shape) != tuple(x.shape):
        raise ValueError(f"batch_norm_backward: gradient {tuple(g.shape)} and input "
                         f"{tuple(x.shape)} differ")
    c = x.shape[1]
    return Aval((c * _count(tuple(x.shape)) + 2 * c,), _grad_dtype(x.dtype, weight.dtype), x.device)


def _grad_dtype(x, weight):
    """The records' dtype: float32 for a bf16 x with a float32 weight (autocast's BatchNorm:
    the statistics and the weight's and bias's gradients stay float32, as PyTorch's are),
    else x's."""
    from .. import dtypes
    return dtypes.float32 if x is dtypes.bfloat16 and weight is dtypes.float32 else x


def _backward_impl(xp, g, x, stats, weight, eps):
    c = x.shape[1]
    count = _count(x.shape)
    out = xp.empty(c * count + 2 * c, x.dtype)   # (bf16 operands come here widened)
    gx = xp.swapaxes(out[:c * count].reshape((c, x.shape[0]) + tuple(x.shape[2:])), 0, 1)
    # g in x's memory order when the two differ (`_g_like_x`); the copy is also the buffer
    # x*b goes to, once g*a is out.
    gk = _g_like_x(xp, g, x)
    # (the two passes as their records run them: a backend's kernels where registered)
    red = BN_BACKWARD_REDUCE.dispatch(xp, g, x, stats, eps, scratch=_scratch_like(xp, x, out[:c * count]),
                                      g_like_x=gk)
    BN_BACKWARD_INPUT.dispatch(xp, g if gk is None else gk, x, stats, weight, red, eps, out=gx, spare=gk)
    out[c * count:] = red.reshape(-1)
    return out


def _channel_major(a) -> bool:
    """Whether `a`'s (N, C, ...) memory runs channel by channel ((C, N, ...) order)."""
    return a.shape[0] > 1 and a.shape[1] > 1 and a.strides[1] > a.strides[0]


def _backward_parts(rec, shape):
    """(input gradient of x's shape, (2, C) = (sum g, sum g*xhat)) as views of the record."""
    from .indexing import getitem
    from .shape import permute, reshape
    c, count = shape[1], _count(tuple(shape))
    gx = reshape(getitem(rec, slice(0, c * count)), (c, shape[0]) + tuple(shape[2:]))
    gx = permute(gx, (1, 0) + tuple(range(2, len(shape))))
    return gx, reshape(getitem(rec, slice(c * count, None)), (2, c))


def _backward_vjp(u, out, g, x, stats, weight, eps):
    # The record is input(g, x, stats, weight, red) beside red = reduce(g, x, stats): the
    # chain rule through the two primitives' own VJPs (red's cotangent gets the input
    # part's d_red added).
    u_gx, u_red = _backward_parts(u, tuple(x.shape))
    _, red = _backward_parts(out, tuple(x.shape))
    d_g1, d_x1, _, d_w, d_red = _input_vjp(u_gx, None, g, x, stats, weight, red, eps)
    d_g2, d_x2, _ = _reduce_vjp(u_red + d_red, None, g, x, stats, eps)
    return d_g1 + d_g2, d_x1 + d_x2, None, d_w


BN_BACKWARD = defprim("batch_norm_backward", _backward_impl, _backward_rule, _backward_vjp,
                      kind="other", save=lambda rq: (0, 1, 3), save_out=True, nondiff=(2,))


# ---------------------------------------------------------------- the forward as one pass
# batch_norm_forward(x, weight, bias) -> flat record (N*C*L + 2*C,): the normalized output,
# then the (2, C) statistics; no gradient. batch_norm_values is the differentiable output:
# the record's head in x's shape (no copy), with batch_norm_train's VJP. It is not marked a
# view of the record, so an in-place op on it (ReLU(inplace=True)) bumps no saved version.
# A bf16 x with a float32 weight (autocast's) has a float32 record, as PyTorch keeps its
# statistics: the output is its head rounded to bf16 once (ops/bf16_eager.py).
def _forward_rule(x, weight, bias, eps):
    if x.ndim < 2:
        raise ValueError(f"batch_norm_forward: expected an input of at least 2 dims, got "
                         f"{tuple(x.shape)}")
    c = x.shape[1]
    for t, name in ((weight, "weight"), (bias, "bias")):
        if tuple(t.shape) != (c,):
            raise ValueError(f"batch_norm_forward: {name} of shape {tuple(t.shape)} should be ({c},)")
    return Aval((numel(x.shape) + 2 * c,), _grad_dtype(x.dtype, weight.dtype), x.device)


def _forward_impl(xp, x, weight, bias, eps):
    c, size = x.shape[1], x.size
    rec = xp.empty(size + 2 * c, x.dtype)
    # (the two passes as their records run them: a backend's kernels where registered)
    stats = BATCH_NORM_STATS.dispatch(xp, x, scratch=_scratch_like(xp, x, rec[:size]))
    BATCH_NORM_TRAIN.dispatch(xp, x, stats, weight, bias, eps, out=rec[:size].reshape(x.shape))
    rec[size:] = stats.reshape(-1)
    return rec


def _scratch_like(xp, x, buf):
    """buf (x's size) seen as x's (N, C, L) in x's memory order: channel-major when x is."""
    n, c = x.shape[0], x.shape[1]
    x3 = x.reshape(n, c, -1)
    if xp is np and x3.strides[1] > x3.strides[0]:
        return buf.reshape(c, n, -1).swapaxes(0, 1)
    return buf.reshape(n, c, -1)


def _values_rule(rec, x, stats, weight, bias, eps):
    if tuple(rec.shape) != (numel(x.shape) + 2 * x.shape[1],):
        raise ValueError(f"batch_norm_values: record of shape {tuple(rec.shape)} is not "
                         f"batch_norm_forward's for an input of shape {tuple(x.shape)}")
    return _train_rule(x, stats, weight, bias, eps)


def _values_impl(xp, rec, x, stats, weight, bias, eps):
    return rec[:x.size].reshape(x.shape)


def _values_vjp(g, out, rec, x, stats, weight, bias, eps):
    return (None,) + _train_vjp(g, out, x, stats, weight, bias, eps)


BATCH_NORM_FORWARD = defprim("batch_norm_forward", _forward_impl, _forward_rule, None, kind="other",
                             extra={"row_major": True})
BATCH_NORM_VALUES = defprim("batch_norm_values", _values_impl, _values_rule, _values_vjp,
                            kind="other", save=lambda rq: (1, 2, 3), nondiff=(0, 2),
                            extra={"moves": (0,), "row_major": True},   # (moves: the record's head, bf16 words)
                            grad_name="NativeBatchNormBackward0")


# ---------------------------------------------------------------- the channel forms
# The records' kernels and a compiled step's BatchNorm are these functions over (N, C, H, W)
# operands: per-channel sums and elementwise ops, one channel group. Per-channel values are
# (1, C, 1, 1); `inv` is 1 / (N*H*W), an operand of the eager kernels so one serves all sizes.
def forward_form(x, weight, bias, inv, eps: float):
    """(y, mean, biased variance) of training-mode BatchNorm: the mean, then the variance
    as the mean of (x - mean)**2 (a second pass over the channel: no cancellation), then
    ``(x - mean) * (weight * rsqrt(var + eps)) + bias``."""
    mean = x.sum((0, 2, 3), keepdim=True) * inv
    xc = x - mean
    var = (xc * xc).sum((0, 2, 3), keepdim=True) * inv
    return xc * (weight * (var + eps).rsqrt()) + bias, mean, var


def backward_form(g, x, mean, var, weight, inv, eps: float):
    """(input gradient, sum g, sum g*xhat) of training-mode BatchNorm: the two sums in one
    pass, then ``w*rstd*(g - sum g/n - xhat*sum(g*xhat)/n)``."""
    rstd = (var + eps).rsqrt()
    xc = x - mean
    s0 = g.sum((0, 2, 3), keepdim=True)
    s1 = (g * xc).sum((0, 2, 3), keepdim=True) * rstd
    return (g - s0 * inv - xc * (rstd * s1 * inv)) * (weight * rstd), s0, s1


# ---------------------------------------------------------------- public functions
def batch_norm_stats(x):
    """(2, C): per-channel mean and biased variance over every dim but 1 (no gradient)."""
    return bind(BATCH_NORM_STATS, x)


def batch_norm_train(x, stats, weight, bias, eps: float):
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` with ``stats = batch_norm_stats(x)``;
    its gradient includes the statistics' dependence on x."""
    return bind(BATCH_NORM_TRAIN, x, stats, weight, bias, eps=float(eps))


def batch_norm_forward(x, weight, bias, eps: float):
    """Training-mode batch norm in one pass: ``(output, stats)``, stats = (2, C) mean and
    biased variance (no gradient), output = ``batch_norm_train(x, stats, weight, bias, eps)``
    (differentiable, its gradient including the statistics' dependence on x)."""
    from .indexing import getitem
    from .shape import clone, reshape
    eps = float(eps)
    rec = bind(BATCH_NORM_FORWARD, x, weight, bias, eps=eps)
    c = x.shape[1]
    # A copy of the 2*C statistics: a view would keep the whole record (the output's
    # memory) alive while the backward holds them, after the output itself is gone.
    stats = clone(reshape(getitem(rec, slice(rec.shape[0] - 2 * c, None)), (2, c)))
    return bind(BATCH_NORM_VALUES, rec, x, stats, weight, bias, eps=eps), stats
