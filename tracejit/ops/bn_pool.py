"""Training-mode batch norm and the max pooling after it as one record: one pass writes the pooled maxima.

``batch_norm_max_pool2d(x, weight, bias, eps, kernel, stride, padding, dilation)`` -> flat
record: max_pool2d_with_offsets' record (2, N, C, OH, OW) of the normalized x (C-contiguous),
then the (2, C) statistics. It is exactly

    r = batch_norm_forward(x, weight, bias, eps)   # normalized output, then statistics
    y = r[:x.size] in x's shape
    max_pool2d_with_offsets(y) then r's statistics

(ops/batchnorm_prim.py, ops/pool_offsets.py), and that composition is its numpy form. Not
differentiable (no VJP), as the two records it replaces: the compiled forward plan takes it
(jit/bn_pool_fusion.py) after differentiation, when the normalized output y is read only by
the pooling's record (the BatchNorm gradient reads x and the statistics, the pooling
gradient the record's offsets), so y is never written.

Why (profile of LeNet's compiled step, one thread): between the conv GEMM and the next conv
the forward made two passes over each conv activation, BatchNorm's (read x, write y) and the
pooling's (read y): (64, 32, 26, 26) float32 is 5.5 MB, more than a core's L2. The kernel does
per channel what batch_norm_forward's does (the same sums, statistics and ``a*x + d`` per
element, in the same dtypes and order, so bitwise its values), then pools each normalized
window from the channel's run of x while it is in cache, with the pooling kernel's window
code (the same first-maximum and NaN rules): y is never stored. That kernel is the CPU
backend's registered implementation (compiler/cpu/kernels/bn_pool_kernels.py).
"""
from __future__ import annotations

import numpy as np

from ..shapes import numel
from . import batchnorm_prim as _bn
from . import pool_offsets as _po
from .registry import Aval, defprim
from .eager import bind

__all__ = ["batch_norm_max_pool2d", "batch_norm_backward_pooled", "record_parts"]


def _rule(x, weight, bias, eps, kernel, stride, padding, dilation):
    _bn._forward_rule(x, weight, bias, eps)
    rec = _po._record_rule(x, kernel, stride, padding, dilation)
    return Aval((numel(rec.shape) + 2 * x.shape[1],), x.dtype, x.device)


def _impl(xp, x, weight, bias, eps, kernel, stride, padding, dilation):
    r = _bn._forward_impl(xp, x, weight, bias, eps)
    y = r[:x.size].reshape(x.shape)
    rec = _po._record_impl(xp, y, kernel, stride, padding, dilation)
    return xp.concatenate([xp.ascontiguousarray(rec).reshape(-1), r[x.size:]])


BATCH_NORM_MAX_POOL2D = defprim("batch_norm_max_pool2d", _impl, _rule, None, kind="other")


def batch_norm_max_pool2d(x, weight, bias, eps: float, kernel, stride, padding=(0, 0),
                          dilation=(1, 1)):
    """The flat record: max_pool2d_with_offsets' record of batch_norm's training-mode output,
    then the (2, C) statistics (see the module docstring); not differentiable."""
    return bind(BATCH_NORM_MAX_POOL2D, x, weight, bias, eps=float(eps), kernel=tuple(kernel),
                stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))


def record_parts(rec, x_shape, kernel, stride, padding, dilation):
    """(pool record (2, N, C, OH, OW), statistics (2, C)) of the flat record, as views."""
    n, c = x_shape[0], x_shape[1]
    oh = (x_shape[2] + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (x_shape[3] + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    psize = 2 * n * c * oh * ow
    return rec[:psize].reshape(2, n, c, oh, ow), rec[psize:].reshape(2, c)


# ---------------------------------------------------------------- the backward
# batch_norm_backward_pooled(gp, rec, x, stats, weight, eps, geometry) -> batch_norm_backward's
# record of the gradient max_pool2d_scatter(gp, rec) for windows side by side (kernel ==
# stride, no padding or dilation: each input position in at most one window). Per channel
# the kernel writes the scattered gradient straight into the channel's block of the output
# (channel-major, as batch_norm_backward's), sums it as that kernel does (the same blocks in
# the same order: bitwise the same sums), then turns the block in place into the input
# gradient: the pooling's gradient (x's size: LeNet's first, 5.5 MB) is never stored and
# read back. The numpy form is the composition.
def _backward_rule(gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    _po._scatter_rule(gp, rec, tuple(x.shape), kernel, stride, padding, dilation)
    return _bn._backward_rule(x, x, stats, weight, eps)


def _backward_impl(xp, gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    g = _po._scatter_impl(xp, gp, rec, tuple(x.shape), kernel, stride, padding, dilation)
    return _bn._backward_impl(xp, g, x, stats, weight, eps)


BN_BACKWARD_POOLED = defprim("batch_norm_backward_pooled", _backward_impl, _backward_rule, None,
                             kind="other")


def batch_norm_backward_pooled(gp, rec, x, stats, weight, eps: float, kernel, stride,
                               padding=(0, 0), dilation=(1, 1)):
    """batch_norm_backward's record (input gradient channel-major, then the two sums) for the
    gradient ``max_pool2d_scatter(gp, rec, x.shape)``; not differentiable (a compiled
    backward plan's op, jit/bn_pool_fusion.py)."""
    return bind(BN_BACKWARD_POOLED, gp, rec, x, stats, weight, eps=float(eps), kernel=tuple(kernel),
                stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
